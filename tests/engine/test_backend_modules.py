"""`speco3.engine.backends` without the bundle: how module files are told apart, what the dynamic loader's and
ggml's words for a failed module are turned into, the one-line CPU fallback notice, and that a build with linked-in
backends (the default .venv) loads nothing and has no notice. The bundle itself: tests/engine/test_dl_bundle.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from speco3.engine import backends, native
from speco3.engine.backends import ModuleLoad, ModuleState


def test_module_files_tell_gpu_modules_from_cpu_variants(tmp_path):
    for name in ("libggml.so", "libggml-base.so", "libggml-cpu-x64.so", "libggml-cpu-zen4.so", "libggml-cuda.so",
                 "libggml-vulkan.so", "libllama.so", "libggml-cpu-haswell.so.bak"):
        (tmp_path / name).write_bytes(b"")
    gpu, cpu = backends.module_files(tmp_path)
    assert [p.name for p in gpu] == ["libggml-cuda.so", "libggml-vulkan.so"]
    assert [p.name for p in cpu] == ["libggml-cpu-x64.so", "libggml-cpu-zen4.so"]
    assert [backends.module_name(p) for p in gpu + cpu] == ["cuda", "vulkan", "cpu", "cpu"]


@pytest.mark.parametrize("logged, name, expected", [
    # the dynamic loader's message (ggml's load_backend: "failed to load PATH: dlerror()")
    ("load_backend: failed to load {p}: libcublas.so.13: cannot open shared object file: No such file or directory",
     "cuda", "libcublas.so.13 not found: the CUDA 13 runtime (cuBLAS) is not installed (the CUDA add-on package "
             "carries it)"),
    ("load_backend: failed to load {p}: libcudart.so.13: cannot open shared object file: No such file or directory",
     "cuda", "libcudart.so.13 not found: the CUDA 13 runtime is not installed (the CUDA add-on package carries it)"),
    ("load_backend: failed to load {p}: libcuda.so.1: cannot open shared object file: No such file or directory",
     "cuda", "libcuda.so.1 not found: no NVIDIA driver (libcuda comes with it)"),
    ("load_backend: failed to load {p}: libfoo.so.2: cannot open shared object file: No such file or directory",
     "cuda", "libfoo.so.2 not found"),
    # the module loaded but its init refused (ggml-vulkan without a Vulkan driver)
    ("load_backend: failed to initialize backend from {p}: ggml_backend_init returned NULL",
     "vulkan", "no Vulkan driver (the Vulkan loader found no ICD, so no Vulkan instance could be made) "
               "(ggml_backend_init returned NULL)"),
    ("load_backend: failed to load {p}: {p}: undefined symbol: ggml_x", "cuda", "{p}: undefined symbol: ggml_x"),
    ("", "cuda", "the module did not load (no reason logged)"),
])
def test_a_failed_module_is_explained(logged, name, expected):
    path = Path("/b/llama_cpp/lib/libggml-cuda.so")
    other = "llama_model_load: some earlier warning"
    text = " | ".join(x for x in (other, logged.format(p=path)) if x)
    got = backends.explain_failure(text, path, name)
    assert got == (expected.format(p=path) if logged else other)


def test_the_notice_is_one_line_naming_the_cpu_variant_and_each_reason():
    folder = Path("/b/lib")
    cuda = ModuleState("libggml-cuda.so", "cuda", False, 0, "libcublas.so.13 not found")
    vulkan = ModuleState("libggml-vulkan.so", "vulkan", True, 0, backends.NO_DEVICE_HINT["vulkan"])
    notice = ModuleLoad(folder, (cuda, vulkan), "zen4").notice()
    assert notice == ("no GPU device initialised, running on the CPU (zen4) — cuda: libcublas.so.13 not found; "
                      f"vulkan: {backends.NO_DEVICE_HINT['vulkan']}")
    assert "\n" not in notice
    assert ModuleLoad(folder, (), "").notice() == ("no GPU device initialised, running on the CPU — no GPU backend "
                                                   "module in the bundle")
    in_use = ModuleState("libggml-vulkan.so", "vulkan", True, 1)
    assert ModuleLoad(folder, (cuda, in_use), "zen4").notice() is None
    assert ModuleLoad(None, registered=("CPU",)).notice() is None  # linked-in backends: nothing to say
    # a GPU in use: the line that says why the other modules are not
    no_device = ModuleState("libggml-cuda.so", "cuda", True, 0, backends.NO_DEVICE_HINT["cuda"])
    assert ModuleLoad(folder, (no_device, in_use), "zen4").unused_line() == (
        f"running on vulkan; unused: cuda: {backends.NO_DEVICE_HINT['cuda']}")
    assert ModuleLoad(folder, (in_use,), "zen4").unused_line() is None
    assert ModuleLoad(folder, (cuda, vulkan), "zen4").unused_line() is None  # the notice says it


@pytest.mark.llama
def test_a_build_with_linked_in_backends_loads_no_module():
    """The default wheel links the CPU backend in (its ``libggml-cpu.so``): the registry is not empty at start, so
    nothing is loaded and there is no notice; in the bundle (no ``libggml-cpu.so``, variants instead) the modules
    are loaded. Either way the registry has the CPU."""
    native.ensure_backend()
    from llama_cpp import _ggml

    folder = Path(_ggml.libggml_base_path)
    modules = native.backend_modules()
    assert modules is not None and "CPU" in modules.registered
    if (folder / "libggml-cpu.so").exists():
        assert not modules.dynamic and native.backend_notice() is None
    else:
        assert modules.dynamic and modules.folder == folder
