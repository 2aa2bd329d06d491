"""Damaged and mismatched GGUF files get a clear `ModelFileError` before llama.cpp ever sees them.

Built from the converter's tiny Qwen2.5-VL pair: truncated (header, tensor table, data, last byte), empty,
zero-filled, header zeroed, lying tensor/metadata counts, wrong architecture, wrong projector type, text and
projector swapped, projector width not matching the text model, a FITS file given as a model. Each goes through
the three paths the app uses: `speco3.engine.open_engine` (with llama.cpp's loader replaced by a tripwire, so the
check provably runs first and nothing native loads in this process), `ModelStore.import_pair` (nothing installed,
nothing left behind) and ``spec-o3 inspect --text --mmproj`` (in a child process: exit status 1 with the file
named, never a signal). The intact pair passes all of them, and `probe_load` keeps a crash of llama.cpp on a
damaged file inside its child.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import gguf
import pytest
from robust_helpers import have_llama

from speco3.errors import ModelFileError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ggufs import rewrite_gguf, write_mmproj_gguf, write_text_gguf  # noqa: E402


def _copy_arch(src: Path, dst: Path, arch: str) -> Path:
    """Copy a GGUF with another ``general.architecture`` (metadata and tensors unchanged)."""
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = f.types[0]
        w.add_key_value(key, f.contents(), vtype, sub_type=f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=list(t.data.shape), raw_dtype=t.tensor_type)  # bytes for quants
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


@pytest.fixture(scope="module")
def variants(tiny_pair, tmp_path_factory, spectra_dir):
    """``{label: (text, mmproj, bad_file)}``; ``bad_file`` is the file the error must name (None: either)."""
    text, mmproj = Path(tiny_pair[0]), Path(tiny_pair[1])
    d = tmp_path_factory.mktemp("bad_gguf")
    tb, mb = text.read_bytes(), mmproj.read_bytes()
    out: dict[str, tuple[Path, Path, Path | None]] = {}

    def bad_text(label: str, data: bytes):
        p = d / f"{label}.gguf"
        p.write_bytes(data)
        out[label] = (p, mmproj, p)

    def bad_mmproj(label: str, data: bytes):
        p = d / f"mmproj-{label}.gguf"
        p.write_bytes(data)
        out[label] = (text, p, p)

    for frac in (0.0005, 0.01, 0.3, 0.9):
        bad_text(f"text_truncated_{frac}", tb[: int(len(tb) * frac)])
    bad_text("text_minus_last_byte", tb[:-1])
    bad_mmproj("mmproj_truncated_0.5", mb[: len(mb) // 2])
    bad_text("text_empty", b"")
    bad_text("text_zero_filled", bytes(len(tb)))
    bad_mmproj("mmproj_zero_filled", bytes(len(mb)))
    bad_text("text_header_zeroed", bytes(4096) + tb[4096:])
    bad_text("text_lying_tensor_count", tb[:8] + struct.pack("<Q", 2**40) + tb[16:])
    bad_text("text_lying_kv_count", tb[:16] + struct.pack("<Q", 2**40) + tb[24:])
    bad_text("text_bitflip_version", tb[:4] + struct.pack("<I", 99) + tb[8:])
    bad_text("text_is_fits", (spectra_dir / "sdss/spec-0266-51602-0638.fits").read_bytes())
    p = _copy_arch(text, d / "wrong-arch-llama.gguf", "llama")
    out["text_wrong_arch"] = (p, mmproj, p)
    p = rewrite_gguf(mmproj, d / "mmproj-wrong-type.gguf", {"clip.projector_type": "ldp"})
    out["mmproj_wrong_projector_type"] = (text, p, p)
    out["swapped"] = (mmproj, text, mmproj)
    p = write_mmproj_gguf(d / "mmproj-width64.gguf", proj_dim=64)
    out["mismatched_width"] = (text, p, None)
    p = write_text_gguf(d / "text-width64.gguf", n_embd=64)
    out["mismatched_width_other_text"] = (p, mmproj, None)
    return out


def _assert_clear(exc: ModelFileError, text: Path, mmproj: Path, bad: Path | None, label: str) -> None:
    assert exc.path in (str(text), str(mmproj), str(text.resolve()), str(mmproj.resolve())), (label, exc.path)
    if bad is not None:
        assert Path(exc.path).name == bad.name, (label, str(exc))
    assert len(exc.reason) >= 12 and "Traceback" not in exc.reason, (label, exc.reason)


def test_the_intact_pair_passes(tiny_pair, tmp_path):
    from speco3_models.gguf_check import check_pair
    from speco3_models.store import ModelStore

    pair = check_pair(*tiny_pair)
    assert pair.width > 0
    model = ModelStore(tmp_path / "store").import_pair(*tiny_pair, name="tiny-ok")
    assert model.name == "tiny-ok"


def test_open_engine_refuses_before_llama_loads(variants, monkeypatch):
    from speco3.engine import native, open_engine
    from speco3.engine.base import EngineSettings

    def tripwire(*args, **kwargs):
        raise AssertionError("llama.cpp was reached with a bad model file")

    monkeypatch.setattr(native, "ensure_backend", tripwire)
    monkeypatch.setattr(native, "import_llama", tripwire)
    for label, (text, mmproj, bad) in variants.items():
        with pytest.raises(ModelFileError) as info:
            open_engine((text, mmproj), EngineSettings(n_ctx=512), threaded=False)
        _assert_clear(info.value, text, mmproj, bad, label)


def test_store_import_refuses_and_leaves_nothing(variants, tmp_path):
    from speco3_models.store import ModelStore

    store = ModelStore(tmp_path / "store")
    for label, (text, mmproj, bad) in variants.items():
        with pytest.raises(ModelFileError) as info:
            store.import_pair(text, mmproj, name=f"bad-{label.replace('_', '-').replace('.', '-')}")
        _assert_clear(info.value, text, mmproj, bad, label)
    assert store.list() == []
    leftovers = [p for p in (tmp_path / "store").rglob("*.gguf")] if (tmp_path / "store").exists() else []
    assert leftovers == []


CLI_CHILD = r"""
import contextlib, io, json, sys
from speco3.cli import main
for label, text, mmproj, spectrum in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(["inspect", spectrum, "--task", "cv", "--text", text, "--mmproj", mmproj, "--quiet",
                   "--out", sys.argv[2] + "/" + label])
    print(json.dumps({"label": label, "rc": rc, "stderr": err.getvalue()[-500:]}), flush=True)
"""


def test_cli_inspect_reports_the_file_and_never_crashes(variants, tmp_path, spectra_dir):
    spectrum = str(spectra_dir / "lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz")
    jobs = [(label, str(t), str(m), spectrum) for label, (t, m, _) in variants.items()]
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    proc = subprocess.run([sys.executable, "-c", CLI_CHILD, json.dumps(jobs), str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert proc.returncode == 0, f"the CLI process died (status {proc.returncode}): {proc.stderr[-2000:]}"
    results = {r["label"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(results) == set(variants)
    for label, (text, mmproj, bad) in variants.items():
        r = results[label]
        assert r["rc"] == 1 and "error: " in r["stderr"] and "Traceback" not in r["stderr"], (label, r)
        named = bad.name if bad is not None else None
        assert (named or text.name) in r["stderr"] or mmproj.name in r["stderr"], (label, r["stderr"])
        assert not (tmp_path / label).exists()  # no trace folder for a run that never started


@pytest.mark.llama
@pytest.mark.skipif(not have_llama(), reason="llama-cpp-python is not installed")
def test_probe_keeps_a_native_failure_in_its_child(variants, tiny_pair):
    """Where only loading can tell, `probe_load` does it in a subprocess: this process survives either way."""
    from speco3_models.probe import probe_load

    good = probe_load(*tiny_pair, timeout=120, warmup=False, n_threads=1)
    assert good.ok, good.error
    text, mmproj, _ = variants["text_truncated_0.9"]
    bad = probe_load(text, mmproj, timeout=120, warmup=False, n_threads=1)
    assert not bad.ok and bad.error
