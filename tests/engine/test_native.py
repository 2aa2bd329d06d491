"""Process-level helpers of the engine: backend naming, thread defaults, the model-file check."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from speco3.engine import native
from speco3.engine.native import Device
from speco3.errors import ModelFileError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from ggufs import rewrite_gguf, write_mmproj_gguf, write_text_gguf  # noqa: E402

CPU = Device("CPU", "CPU", "CPU", "AMD EPYC")
CUDA = Device("CUDA", "CUDA0", "GPU", "NVIDIA H200")
METAL = Device("Metal", "MTL0", "IGPU", "Apple M3")


def test_backend_label_names_the_offload_device():
    assert native.backend_label(-1, [CUDA, CPU]) == "CUDA0 (NVIDIA H200)"  # the device ggml runs it on
    assert native.backend_label(-1, [METAL, CPU]) == "Metal (Apple M3)"
    assert native.backend_label(0, [CUDA, CPU]) == "CPU"  # nothing offloaded
    assert native.backend_label(-1, [CPU]) == "CPU"  # CPU-only build
    assert native.backend_label(-1, [Device("Vulkan", "Vulkan0", "GPU", ""), CPU]) == "Vulkan0"


def test_default_threads_are_positive():
    threads, batch = native.default_threads()
    assert 1 <= threads <= batch


@pytest.fixture
def good_pair(tmp_path):
    """A complete, matching text model + projector (hidden size 64): every case below changes one thing in it."""
    return write_text_gguf(tmp_path / "text.gguf"), write_mmproj_gguf(tmp_path / "mmproj.gguf")


def test_check_model_files_accepts_a_good_pair(good_pair):
    from speco3_models.gguf_check import check_pair

    assert native.check_model_files(*good_pair) is None
    assert check_pair(*good_pair).width == 64  # the same pair, through the checks the engine relies on


def _refused(text, proj, which, reason):
    with pytest.raises(ModelFileError) as err:
        native.check_model_files(text, proj)
    assert err.value.reason == reason
    assert err.value.path == str(which)


def test_missing_and_non_regular_files_are_refused(good_pair, tmp_path):
    text, proj = good_pair
    _refused(tmp_path / "absent.gguf", proj, tmp_path / "absent.gguf", "file not found")
    _refused(text, tmp_path / "absent-mmproj.gguf", tmp_path / "absent-mmproj.gguf", "file not found")
    folder = tmp_path / "folder.gguf"
    folder.mkdir()
    _refused(folder, proj, folder, "not a regular file")
    if hasattr(os, "mkfifo"):  # a FIFO would block llama.cpp's open()
        fifo = tmp_path / "fifo.gguf"
        os.mkfifo(fifo)
        _refused(text, fifo, fifo, "not a regular file")


def test_wrong_magic_is_refused(good_pair):
    text, proj = good_pair
    text.write_bytes(b"PK\x03\x04" + text.read_bytes()[4:])  # the same file but for its first four bytes
    _refused(text, proj, text, "not a GGUF file (no 'GGUF' magic; the file starts with b'PK\\x03\\x04')")


def test_wrong_text_architecture_is_refused(good_pair, tmp_path):
    """Only general.architecture differs (every qwen2vl.* key and tensor is there): the architecture check alone fails."""
    text, proj = good_pair
    llama = rewrite_gguf(text, tmp_path / "llama.gguf", {"general.architecture": "llama"})
    _refused(llama, proj, llama, "architecture is 'llama', expected 'qwen2vl' (Qwen2.5-VL text model)")


def test_swapped_pair_is_refused(good_pair):
    text, proj = good_pair
    _refused(proj, text, proj, "architecture is 'clip', expected 'qwen2vl' (Qwen2.5-VL text model) "
                               "— this is a vision projector, not the text model")


def test_wrong_projector_type_is_refused(good_pair, tmp_path):
    text, proj = good_pair
    q2 = rewrite_gguf(proj, tmp_path / "q2.gguf", {"clip.projector_type": "qwen2vl_merger"})
    _refused(text, q2, q2, "projector type is 'qwen2vl_merger', expected 'qwen2.5vl_merger' "
                           "(a Qwen2-VL projector; Spec-o3 needs Qwen2.5-VL)")


def test_missing_text_metadata_is_refused(good_pair, tmp_path):
    text, proj = good_pair
    t = write_text_gguf(tmp_path / "t.gguf", drop_keys=("qwen2vl.block_count",))
    _refused(t, proj, t, "incomplete text model metadata: missing qwen2vl.block_count")


def test_projector_of_another_model_is_refused(good_pair, tmp_path):
    text, _ = good_pair
    wide = write_mmproj_gguf(tmp_path / "wide.gguf", proj_dim=128)
    _refused(text, wide, wide, "projector output width is 128 but the text model text.gguf has hidden size 64: "
                               "this projector belongs to another model")
