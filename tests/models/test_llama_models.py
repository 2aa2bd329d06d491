"""With the converter and llama-cpp-python: ``spec-o3 convert`` on the tiny checkpoint gives a registered model
whose files llama.cpp loads, pulling a safetensors repository converts it, and `probe_load` survives an abort."""

from __future__ import annotations

import hashlib
import os
import sys

import pytest
from ggufs import rewrite_gguf, write_mmproj_gguf, write_text_gguf
from test_pull import FakeHub

from speco3.cli import main
from speco3_converters.build import build_model
from speco3_models.gguf_check import check_pair
from speco3_models.probe import probe_load
from speco3_models.pull import pull
from speco3_models.store import ModelStore, resolve_model

pytestmark = pytest.mark.llama
pytest.importorskip("llama_cpp")  # the llm extra; a failure under SPECO3_STRICT_SKIPS=1

from speco3_testkit import tinymodel as testing  # noqa: E402


@pytest.fixture(scope="module")
def tiny_ckpt(tmp_path_factory):
    return testing.make_tiny_qwen25vl(tmp_path_factory.mktemp("ckpt") / "spec-o3-tiny")


@pytest.fixture(scope="module")
def tiny_pair(tiny_gguf):
    return tiny_gguf("Q8_0")


def test_convert_registers_a_model_that_loads(tiny_ckpt, capsys):
    code = main(["convert", str(tiny_ckpt), "--default"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "installed spec-o3-tiny-q4_k_m (Q4_K_M" in out
    assert "quantize" in err and "verify" in err, "progress of every step on stderr"
    model = resolve_model()
    assert model.name == "spec-o3-tiny-q4_k_m" and model.quant == "Q4_K_M" and model.hidden_size == 256
    assert model.provenance.kind == "converted" and model.provenance.source == str(tiny_ckpt.resolve())
    assert model.provenance.converter_version
    folder = ModelStore().root / model.name
    assert sorted(p.name for p in folder.iterdir()) == sorted([model.text_path.name, model.mmproj_path.name]), \
        "the BF16 intermediate is deleted"
    assert not (ModelStore().root / ".build" / model.name).exists()
    probe = probe_load(model.text_path, model.mmproj_path, timeout=120)
    assert probe.ok, probe.error
    assert probe.info["n_embd"] == 256 and probe.info["vision"] is True
    code = main(["models", "verify", "--load"])
    out, _ = capsys.readouterr()
    assert code == 0 and "load: ok" in out


def test_convert_to_a_folder_without_registering(tiny_ckpt, tmp_path, capsys):
    out_dir = tmp_path / "out"
    code = main(["convert", str(tiny_ckpt), "--quant", "Q8_0", "--out", str(out_dir), "--no-register",
                 "--keep-intermediate"])
    out, err = capsys.readouterr()
    assert code == 0, err
    names = sorted(p.name for p in out_dir.glob("*.gguf"))
    assert names == ["mmproj-spec-o3-tiny-F16.gguf", "spec-o3-tiny-BF16.gguf", "spec-o3-tiny-Q8_0.gguf"]
    check_pair(out_dir / "spec-o3-tiny-Q8_0.gguf", out_dir / "mmproj-spec-o3-tiny-F16.gguf")
    assert ModelStore().list() == []
    code = main(["convert", str(tiny_ckpt), "--dry-run"])
    out, _ = capsys.readouterr()
    assert code == 0 and "token_embd.weight" in out and "qwen2.5vl_merger" in out


def test_pull_of_a_safetensors_repository_converts_it(tiny_ckpt, monkeypatch):
    hub = FakeHub(tiny_ckpt)
    sibs = hub.siblings()
    for s in sibs:  # small files carry a git blob id instead of an LFS sha256, as on the hub
        if not s.rfilename.endswith(".safetensors"):
            data = (tiny_ckpt / s.rfilename).read_bytes()
            s.lfs, s.blob_id = None, hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    hub.siblings = lambda: sibs
    hub.install(monkeypatch)
    store = ModelStore()
    model = pull(store, "someone/spec-o3-tiny", "Q8_0", convert=build_model)
    assert set(hub.downloads) == {p.name for p in tiny_ckpt.iterdir()}
    assert model.provenance.kind == "pulled" and model.provenance.source.startswith("someone/spec-o3-tiny@0123")
    assert model.provenance.converter_version and model.quant == "Q8_0"
    assert not any(store.downloads_dir().rglob("*.safetensors")), "the checkpoint is deleted after conversion"
    assert store.verify(model.name).ok


def test_probe_survives_an_abort_inside_llama_cpp(tiny_pair, tmp_path):
    text, mmproj = tiny_pair
    bad = rewrite_gguf(mmproj, tmp_path / "bad-mmproj.gguf", {"clip.vision.attention.head_count": 3})
    result = probe_load(text, bad, timeout=120)
    assert not result.ok and "SIGABRT" in result.error and "GGML_ASSERT" in result.error
    assert os.getpid() and sys.modules["speco3_models.probe"], "this process is still alive"
    good = probe_load(text, mmproj, timeout=120)
    assert good.ok, good.error


def test_probe_reports_a_text_model_llama_cpp_refuses(tmp_path):
    text = write_text_gguf(tmp_path / "t.gguf")  # passes the header checks, has no tokenizer merges
    proj = write_mmproj_gguf(tmp_path / "p.gguf")
    result = probe_load(text, proj, timeout=60)
    assert not result.ok and "could not load the text model" in result.error
    assert "merges" in result.error
