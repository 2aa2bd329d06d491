"""Model store: import, list, verify (sha256 catches one changed byte), remove, default, atomic manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import speco3_models.files as files_mod
from speco3.errors import ModelFileError
from speco3_models.errors import ModelNotInstalledError, ModelStoreError
from speco3_models.gguf_scan import scan_gguf
from speco3_models.store import ModelStore, resolve_model


def _flip_data_byte(path):
    scan = scan_gguf(path)
    pos = scan.tensors[-1].offset + 5
    with open(path, "r+b") as fh:
        fh.seek(pos)
        b = fh.read(1)
        fh.seek(pos)
        fh.write(bytes([b[0] ^ 0xFF]))


def test_default_root_is_in_the_data_dir():
    assert ModelStore().root == Path(os.environ["SPECO3_DATA_DIR"]) / "models"


def test_import_copy_list_verify_remove(gguf_pair):
    text, proj = gguf_pair
    store = ModelStore()
    seen = []
    model = store.import_pair(text, proj, progress=lambda label, done, total: seen.append(label))
    assert model.name == "tiny-text-f32" and model.quant == "F32" and model.hidden_size == 64
    assert model.text_path.parent == store.root / model.name and model.text.managed
    assert text.exists() and proj.exists(), "copy mode keeps the originals"
    assert len(model.text.sha256) == 64 and model.text.size == text.stat().st_size
    assert model.provenance.kind == "imported" and model.provenance.source == str(text.resolve())
    assert any(lbl.startswith("sha256") for lbl in seen) and any(lbl.startswith("copy") for lbl in seen)
    assert [m.name for m in store.list()] == [model.name]
    assert store.get(model.name).text.sha256 == model.text.sha256
    report = store.verify(model.name)
    assert report.ok and all(f.sha256_checked for f in report.files)
    # a fresh store object reads the same manifest
    assert ModelStore(store.root).get(model.name).created == model.created
    store.remove(model.name)
    assert store.list() == [] and not (store.root / model.name).exists()
    assert text.exists()


def test_verify_detects_a_modified_byte_missing_and_truncated_files(gguf_pair):
    store = ModelStore()
    model = store.import_pair(*gguf_pair)
    _flip_data_byte(model.text_path)
    report = store.verify(model.name)
    assert not report.ok
    text_check = report.files[0]
    assert any("sha256 differs" in p for p in text_check.problems) and report.files[1].ok
    assert store.verify(model.name, hashes=False).ok, "without hashes a same-size edit of tensor data is not seen"
    with open(model.mmproj_path, "r+b") as fh:
        fh.truncate(1000)
    problems = store.verify(model.name).files[1].problems
    assert any("size is 1000 bytes" in p for p in problems) and any("truncated" in p for p in problems)
    model.text_path.unlink()
    assert store.verify(model.name).files[0].problems == ["missing"]
    assert "FAILED" in store.verify(model.name).lines()[0]


def test_link_and_move_modes(gguf_pair, make_pair):
    store = ModelStore()
    text, proj = gguf_pair
    linked = store.import_pair(text, proj, "linked", copy=False)
    assert linked.text.managed and os.path.samefile(linked.text_path, text)
    store.remove("linked")
    assert text.exists() and proj.exists(), "removing a hard-linked model keeps the user's files"
    t2, p2 = make_pair("moved")
    moved = store.import_pair(t2, p2, "moved", copy=False, move=True)
    assert not t2.exists() and moved.text_path.exists()


def test_bad_pairs_leave_nothing_behind(tmp_path, gguf_pair, make_pair):
    store = ModelStore()
    text, proj = gguf_pair
    with pytest.raises(ModelFileError, match="vision projector, not the text model"):
        store.import_pair(proj, text)
    t128, p128 = make_pair("wide", n_embd=128)
    with pytest.raises(ModelFileError, match="projector output width is 128"):
        store.import_pair(text, p128)
    with pytest.raises(ModelFileError, match="no such file"):
        store.import_pair(tmp_path / "missing.gguf", proj)
    with pytest.raises(ModelStoreError, match="invalid model name"):
        store.import_pair(text, proj, "../evil")
    assert store.list() == []
    assert not store.root.exists() or [p.name for p in store.root.iterdir() if not p.name.startswith("manifest")] == []


def test_duplicate_names_are_refused(gguf_pair):
    store = ModelStore()
    store.import_pair(*gguf_pair, name="a")
    with pytest.raises(ModelStoreError, match="already installed"):
        store.import_pair(*gguf_pair, name="a")
    assert len(store.list()) == 1


def test_default_and_resolve(make_pair):
    store = ModelStore()
    with pytest.raises(ModelNotInstalledError) as info:
        resolve_model(None, store)
    msg = str(info.value)
    assert "no model installed" in msg and "spec-o3 models import TEXT.gguf MMPROJ.gguf" in msg
    assert "spec-o3 convert HF_DIR" in msg and "spec-o3 models pull" in msg
    assert store.default() is None
    small = store.import_pair(*make_pair("s"), name="spec-o3-3b-q4_k_m", catalog_id="spec-o3-3b")
    big = store.import_pair(*make_pair("b"), name="spec-o3-7b-q8_0", catalog_id="spec-o3-7b")
    other = store.import_pair(*make_pair("o"), name="other")
    assert [m.name for m in store.list()] == [big.name, small.name, other.name]
    assert store.default().name == big.name and store.default_name() is None
    store.set_default("other")
    assert resolve_model(None, store).name == "other"
    assert resolve_model("spec-o3-3b", store).name == small.name, "a catalog name finds its installed build"
    with pytest.raises(ModelNotInstalledError, match="installed: spec-o3-7b-q8_0"):
        resolve_model("spec-o3-9b", store)
    store.remove("other")
    assert store.default().name == big.name and store.default_name() is None
    info = big.model_info()
    assert info["model_id"] == "spec-o3-7b" and info["text_sha256"] == big.text.sha256


def test_manifest_survives_a_crash_mid_write(gguf_pair, make_pair, monkeypatch):
    store = ModelStore()
    first = store.import_pair(*gguf_pair, name="first")
    before = store.manifest_path.read_bytes()

    def crash(fd):
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(files_mod.os, "fsync", crash)
    with pytest.raises(KeyboardInterrupt):
        store.import_pair(*make_pair("second"), name="second")
    monkeypatch.undo()
    assert store.manifest_path.read_bytes() == before
    assert [m.name for m in store.list()] == [first.name]
    assert not list(store.root.glob(".manifest.json.*")), "no temporary file is left behind"
    assert not (store.root / "second").exists(), "the half-installed files were cleaned up"


def test_unreadable_manifest_is_a_clear_error(gguf_pair):
    store = ModelStore()
    store.root.mkdir(parents=True)
    store.manifest_path.write_text("{not json")
    with pytest.raises(ModelStoreError, match="cannot read the model manifest"):
        store.list()
    store.manifest_path.write_text(json.dumps({"schema": 99, "models": []}))
    with pytest.raises(ModelStoreError, match="newer Spec-o3"):
        store.list()


def test_link_across_file_systems_references_in_place(gguf_pair, monkeypatch):
    def no_link(src, dst):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    store = ModelStore()
    text, proj = gguf_pair
    model = store.import_pair(text, proj, "ref", copy=False)
    assert model.text_path == text.resolve() and not model.text.managed
    assert store.verify("ref").ok
    store.remove("ref")
    assert text.exists() and proj.exists(), "files referenced in place are never deleted"


def test_files_left_by_an_interrupted_import_are_replaced(gguf_pair):
    store = ModelStore()
    text, proj = gguf_pair
    leftover = store.root / "again" / text.name
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"half a copy")
    model = store.import_pair(text, proj, "again")
    assert model.text.size == text.stat().st_size and store.verify("again").ok


def test_the_store_folder_can_be_moved(gguf_pair, tmp_path):
    store = ModelStore(tmp_path / "old")
    store.import_pair(*gguf_pair, name="m")
    raw = json.loads(store.manifest_path.read_text())
    assert raw["models"][0]["text"]["path"] == f"m/{gguf_pair[0].name}", "managed paths are relative"
    (tmp_path / "old").rename(tmp_path / "new")
    moved = ModelStore(tmp_path / "new")
    assert moved.get("m").text_path == tmp_path / "new" / "m" / gguf_pair[0].name
    assert moved.verify("m").ok


def test_concurrent_imports_from_two_processes_both_land(make_pair, tmp_path):
    import subprocess
    import sys

    root = tmp_path / "shared-store"
    pairs = [make_pair(f"p{i}") for i in range(2)]
    code = ("import sys; from speco3_models.store import ModelStore; "
            "ModelStore(sys.argv[1]).import_pair(sys.argv[2], sys.argv[3], sys.argv[4])")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(root), str(t), str(p), f"m{i}"])
             for i, (t, p) in enumerate(pairs)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert sorted(m.name for m in ModelStore(root).list()) == ["m0", "m1"]


def test_same_file_names_from_two_folders(tmp_path):
    from ggufs import write_mmproj_gguf, write_text_gguf

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    text = write_text_gguf(tmp_path / "a" / "model.gguf")
    proj = write_mmproj_gguf(tmp_path / "b" / "model.gguf")
    model = ModelStore().import_pair(text, proj, "same")
    assert model.text_path != model.mmproj_path and model.mmproj_path.name == "mmproj-model.gguf"
    assert ModelStore().verify("same").ok
