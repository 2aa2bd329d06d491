"""Process-level helpers of the engine: backend naming, thread defaults, the model-file check."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from speco3.engine import native
from speco3.engine.native import Device
from speco3.errors import ModelFileError

CPU = Device("CPU", "CPU", "CPU", "AMD EPYC")
CUDA = Device("CUDA", "CUDA0", "GPU", "NVIDIA H200")
METAL = Device("Metal", "MTL0", "IGPU", "Apple M3")


def test_backend_label_names_the_offload_device():
    assert native.backend_label(-1, [CUDA, CPU]) == "CUDA (NVIDIA H200)"
    assert native.backend_label(-1, [METAL, CPU]) == "Metal (Apple M3)"
    assert native.backend_label(0, [CUDA, CPU]) == "CPU"  # nothing offloaded
    assert native.backend_label(-1, [CPU]) == "CPU"  # CPU-only build


def test_default_threads_are_positive():
    threads, batch = native.default_threads()
    assert 1 <= threads <= batch


def _write(path, arch, keys=None, with_tensor=True):
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in (keys or {}).items():
        (w.add_uint32 if isinstance(value, int) and not isinstance(value, bool) else
         w.add_bool if isinstance(value, bool) else w.add_string)(key, value)
    if with_tensor:
        w.add_tensor("t.weight", np.zeros((4, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("case,reason", [
    ("missing", "file not found"),
    ("magic", "GGUF"),
    ("arch", "qwen2vl"),
    ("swapped", "qwen2vl"),
])
def test_check_model_files_names_the_file_and_problem(tmp_path, case, reason):
    """The engine refuses bad files through the model store's checks, before llama.cpp sees them."""
    text = _write(tmp_path / "text.gguf", "qwen2vl", {"qwen2vl.embedding_length": 256})
    proj = _write(tmp_path / "mmproj.gguf", "clip", {
        "clip.has_vision_encoder": True, "clip.projector_type": "qwen2.5vl_merger", "clip.vision.projection_dim": 256})
    if case == "missing":
        text = tmp_path / "absent.gguf"
    elif case == "magic":
        text.write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    elif case == "arch":
        text = _write(tmp_path / "llama.gguf", "llama")
    elif case == "swapped":
        text, proj = proj, text
    with pytest.raises(ModelFileError, match=reason) as err:
        native.check_model_files(text, proj)
    assert err.value.path in (str(text), str(proj))
