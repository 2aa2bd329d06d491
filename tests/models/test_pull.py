"""Hub pull: offline it fails fast with the alternatives and no network call; the download logic runs against a
local stand-in for the hub (no network), including checksum checks."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from speco3_models.errors import DownloadError, ModelStoreError, OfflineError, OperationCancelled
from speco3_models.pull import pull
from speco3_models.store import ModelStore


def test_offline_pull_is_plain_and_makes_no_network_call(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    calls = []

    def record(name):
        def fail(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"network call {name}")
        return fail

    monkeypatch.setattr(socket, "getaddrinfo", record("getaddrinfo"))
    monkeypatch.setattr(socket.socket, "connect", record("connect"))
    monkeypatch.setattr(socket, "create_connection", record("create_connection"))
    start = time.monotonic()
    with pytest.raises(OfflineError) as info:
        pull(ModelStore(), "spec-o3-7b")
    assert time.monotonic() - start < 1.0
    msg = str(info.value)
    assert "offline" in msg and "Maxwell-Jia/spec-o3-7b" in msg
    assert "spec-o3 models import TEXT.gguf MMPROJ.gguf" in msg and "spec-o3 convert HF_DIR" in msg
    assert calls == []


def test_unreachable_hub_gives_the_same_plain_message(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("SPECO3_OFFLINE", raising=False)
    import huggingface_hub

    def refuse(*args, **kwargs):
        raise OSError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", refuse)
    with pytest.raises(OfflineError, match="cannot reach the Hugging Face Hub.*spec-o3 models import"):
        pull(ModelStore(), "spec-o3-3b")


def test_unknown_name_lists_catalog():
    with pytest.raises(ModelStoreError, match="known models: spec-o3-7b, spec-o3-3b"):
        pull(ModelStore(), "spec-o3-9b")


def test_core_modules_do_not_import_huggingface_hub(tmp_path):
    code = ("import sys, speco3_models.store, speco3_models.gguf_check, speco3_converters.build, speco3.cli.models\n"
            "from speco3.cli import main\n"
            "main(['models', 'list'])\n"
            "assert 'huggingface_hub' not in sys.modules, 'imported huggingface_hub'\n")
    env = {"SPECO3_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}  # the sources under test, not an install
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr


class FakeHub:
    """Serves files from a local folder through the two hub calls `pull` uses."""

    def __init__(self, folder: Path, corrupt: str | None = None):
        self.folder, self.corrupt, self.downloads = folder, corrupt, []

    def siblings(self):
        out = []
        for f in sorted(self.folder.iterdir()):
            data = f.read_bytes()
            out.append(SimpleNamespace(rfilename=f.name, size=len(data), blob_id=None,
                                       lfs=SimpleNamespace(sha256=hashlib.sha256(data).hexdigest())))
        return out

    def install(self, monkeypatch):
        import huggingface_hub

        hub = self
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("SPECO3_OFFLINE", raising=False)

        def model_info(api, repo_id, revision=None, files_metadata=False):
            assert files_metadata
            return SimpleNamespace(sha="0123456789abcdef0123456789abcdef01234567", siblings=hub.siblings())

        def download(repo_id, filename, *, revision, local_dir, tqdm_class=None, **kw):
            hub.downloads.append(filename)
            data = (hub.folder / filename).read_bytes()
            if filename == hub.corrupt:
                data = data[:-1] + bytes([data[-1] ^ 1])
            bar = tqdm_class(total=len(data), initial=0)
            dst = Path(local_dir) / filename
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
            bar.update(len(data))
            bar.close()
            return str(dst)

        monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)


def _gguf_repo(tmp_path, make_pair):
    text, proj = make_pair("repo")
    repo = tmp_path / "hubrepo"
    repo.mkdir()
    text.rename(repo / "tiny-Q8_0.gguf")
    proj.rename(repo / "mmproj-tiny-f16.gguf")
    (repo / "README.md").write_text("card")
    return repo


def test_pull_of_a_gguf_repository(tmp_path, make_pair, monkeypatch):
    hub = FakeHub(_gguf_repo(tmp_path, make_pair))
    hub.install(monkeypatch)
    seen = []
    store = ModelStore()
    model = pull(store, "someone/tiny-gguf", "Q8_0", progress=lambda lbl, d, t: seen.append((lbl, d, t)))
    assert hub.downloads == ["tiny-Q8_0.gguf", "mmproj-tiny-f16.gguf"]
    assert model.provenance.kind == "pulled"
    assert model.provenance.source == "someone/tiny-gguf@0123456789abcdef0123456789abcdef01234567"
    assert model.text_path.parent == store.root / model.name
    assert ("download tiny-Q8_0.gguf", model.text.size, model.text.size) in seen
    assert store.verify(model.name).ok
    starts = [lbl for lbl, done, _ in seen if lbl == "sha256 tiny-Q8_0.gguf" and done == 0]
    assert len(starts) == 1, "the hash computed on arrival is reused when the file is moved into the store"
    with pytest.raises(DownloadError, match="no Q4_K_M text model in the repository"):
        pull(store, "someone/tiny-gguf", "Q4_K_M")


def test_pull_refuses_a_file_that_does_not_match_its_checksum(tmp_path, make_pair, monkeypatch):
    hub = FakeHub(_gguf_repo(tmp_path, make_pair), corrupt="mmproj-tiny-f16.gguf")
    hub.install(monkeypatch)
    store = ModelStore()
    with pytest.raises(DownloadError, match="does not match the repository's checksum"):
        pull(store, "someone/tiny-gguf", "Q8_0")
    assert store.list() == []
    assert not list(store.downloads_dir().rglob("mmproj-tiny-f16.gguf")), "the damaged file is deleted"


def test_pull_refuses_an_incomplete_checkpoint(tmp_path, monkeypatch):
    repo = tmp_path / "ckpt"
    repo.mkdir()
    (repo / "config.json").write_text("{}")
    FakeHub(repo).install(monkeypatch)
    with pytest.raises(DownloadError, match="missing tokenizer.json.*safetensors"):
        pull(ModelStore(), "spec-o3-7b")


def test_a_checkpoint_without_a_converter_is_refused_before_any_download(tmp_path, monkeypatch):
    """The model package never imports the converter: a safetensors repository needs the caller's convert step."""
    from speco3_models import catalog

    repo = tmp_path / "ckpt"
    repo.mkdir()
    for name in catalog.get("spec-o3-7b").required_files:
        (repo / name).write_text("{}")
    (repo / "model.safetensors").write_bytes(b"\0" * 16)
    hub = FakeHub(repo)
    hub.install(monkeypatch)
    with pytest.raises(ModelStoreError, match="holds a safetensors checkpoint, which must be converted, and no "
                                              "converter was given"):
        pull(ModelStore(), "spec-o3-7b")
    assert hub.downloads == []


def test_blocked_sockets_give_the_offline_message(monkeypatch):
    """With offline mode off, the suite's socket guard stands in for a machine without a network."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("SPECO3_OFFLINE", raising=False)
    start = time.monotonic()
    with pytest.raises(OfflineError, match="spec-o3 convert HF_DIR"):
        pull(ModelStore(), "spec-o3-7b")
    assert time.monotonic() - start < 10


def test_cancel_from_the_progress_callback(tmp_path, make_pair, monkeypatch):
    FakeHub(_gguf_repo(tmp_path, make_pair)).install(monkeypatch)

    def cancel(label, done, total):
        if label.startswith("download") and done:
            raise OperationCancelled("cancelled by the user")

    store = ModelStore()
    with pytest.raises(OperationCancelled):
        pull(store, "someone/tiny-gguf", "Q8_0", progress=cancel)
    assert store.list() == []


def test_pull_checks_name_and_quant_before_any_download(gguf_pair, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    store = ModelStore()
    store.import_pair(*gguf_pair, name="spec-o3-7b-q4_k_m")
    with pytest.raises(ModelStoreError, match="spec-o3-7b-q4_k_m is already installed"):
        pull(store, "spec-o3-7b")
    with pytest.raises(ModelStoreError, match="unknown quantization 'Q3_X'"):
        pull(store, "spec-o3-3b", "q3_x")
