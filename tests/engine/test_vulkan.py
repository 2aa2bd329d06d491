"""The real engine on a real Vulkan device: Mesa's lavapipe (llvmpipe, a Vulkan 1.3 device that runs on the CPU).

Opt-in: ``SPECO3_VULKAN=1``, run with the Vulkan build of llama-cpp-python (``scripts/setup-vulkan.sh``)::

    SPECO3_VULKAN=1 .venv-vulkan/bin/python -m pytest tests/engine/test_vulkan.py

ggml ignores CPU-type Vulkan devices such as lavapipe unless ``GGML_VK_VISIBLE_DEVICES`` names them; this module
sets it to ``0`` (when unset) at collection, before any test initialises ggml's backend registry. The reference
is the CPU backend of the same build (``n_gpu_layers=0``, which the engine runs with no device at all).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from speco3.engine import native
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine

ENV = "SPECO3_VULKAN"
ENABLED = os.environ.get(ENV) == "1"
if ENABLED:
    os.environ.setdefault("GGML_VK_VISIBLE_DEVICES", "0")

pytestmark = [
    pytest.mark.llama,
    pytest.mark.optin(ENV),  # may skip under SPECO3_STRICT_SKIPS=1 unless SPECO3_VULKAN=1
    pytest.mark.skipif(not ENABLED, reason=f"the Vulkan tests are opt-in ({ENV}=1, with .venv-vulkan's python)"),
]

# flash attention is not supported on lavapipe; F32 KV cache for tight numbers (as tests/engine/conftest.py)
TIGHT = dict(n_ctx=2048, flash_attn=False, kv_type="f32", n_threads=2)
PROMPT = "Is this a quasar?<|im_end|>\n<|im_start|>assistant\n"
# Measured on lavapipe (LLVM 15, Mesa 22.3) against the CPU backend of the same build, tiny F32 pair, one image and
# ~20 text tokens: cosine 0.99997 with all or 1 of 3 layers on the device (max abs. difference 0.06),
# same top-5 tokens. The bound leaves a margin over what was measured.
MIN_COSINE = 0.9999
NATIVE = "speco3.engine.llama_cpp_native"


@pytest.fixture(scope="module")
def vulkan_device() -> native.Device:
    native.ensure_backend()
    devices = [d for d in native.list_devices() if d.backend == "Vulkan"]
    assert devices, (f"no Vulkan device in ggml's registry ({native.list_devices()}): run with the Vulkan build "
                     "(scripts/setup-vulkan.sh, .venv-vulkan/bin/python) on a machine with a Vulkan driver")
    return devices[0]


@pytest.fixture
def engines(tiny_pair):
    made = []

    def make(**overrides) -> LlamaMtmdEngine:
        engine = LlamaMtmdEngine(*tiny_pair, EngineSettings(**{**TIGHT, **overrides}), warmup=False)
        engine.load()
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


def _logits(engine: LlamaMtmdEngine, image) -> np.ndarray:
    engine.reset(keep_cache=False)
    engine.extend(["<|im_start|>user\n", image, PROMPT])
    engine.evaluate()
    return engine.last_logits()


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("n_gpu_layers, shown", [(-1, "3/3"), (1, "1/3")])
def test_logits_match_the_cpu_backend(vulkan_device, engines, images, caplog, n_gpu_layers, shown):
    cpu = engines(n_gpu_layers=0, mmproj_on_gpu=False)
    assert cpu.stats().backend == "CPU"
    with caplog.at_level(logging.DEBUG, logger=NATIVE):
        dev = engines(n_gpu_layers=n_gpu_layers, mmproj_on_gpu=True)
    native_log = "\n".join(r.getMessage() for r in caplog.records if r.name == NATIVE)
    assert f"offloaded {shown} layers to GPU" in native_log
    assert re.search(r"CLIP using Vulkan\d backend", native_log)  # the projector runs on the device
    st = dev.stats()
    assert st.backend == f"{vulkan_device.name} ({vulkan_device.description})"
    assert st.extra["mmproj_backend"] == st.backend and st.extra["n_gpu_layers"] in (3, 1)
    for image in images[:2]:
        ref, got = _logits(cpu, image), _logits(dev, image)
        cos = _cosine(ref, got)
        print(f"n_gpu_layers {n_gpu_layers}: cosine {cos:.7f}, max |diff| {np.abs(ref - got).max():.2e}")
        assert cos >= MIN_COSINE
        assert int(np.argmax(got)) == int(np.argmax(ref))
        assert np.argsort(got)[-5:].tolist() == np.argsort(ref)[-5:].tolist()
    dev.reset()
    dev.extend(["<|im_start|>user\n", images[0], PROMPT])
    assert dev.generate(max_tokens=8).n_tokens > 0


def test_zero_layers_uses_no_device(vulkan_device, engines, caplog):
    """``n_gpu_layers=0`` is the CPU alone: no Vulkan buffer at all (llama.cpp would otherwise still run large
    prefill batches on the device)."""
    with caplog.at_level(logging.DEBUG, logger=NATIVE):
        engine = engines(n_gpu_layers=0, mmproj_on_gpu=False)
        engine.extend(["<|im_start|>user\n" + "spectrum " * 60 + PROMPT])
        engine.evaluate()
    native_log = "\n".join(r.getMessage() for r in caplog.records if r.name == NATIVE)
    assert "compute buffer size" in native_log
    assert not re.search(r"Vulkan\d (compute|KV|model) buffer", native_log), native_log[-2000:]
    assert "CLIP using CPU backend" in native_log


def test_models_fit_plans_against_the_device_memory(vulkan_device, tiny_pair, capsys):
    """`spec-o3 models fit` reads the device's memory from ggml (the figure vulkaninfo reports for its heap) and
    plans with it: the tiny pair goes on the device whole; the 7B catalog model does not fit its 2 GiB."""
    from speco3.cli import main

    heaps = [int(m) for m in re.findall(r"memoryHeaps\[\d+\]:\s*size\s*=\s*(\d+)",
                                        subprocess.run(["vulkaninfo"], capture_output=True, text=True).stdout)]
    assert vulkan_device.total_bytes == heaps[0], (vulkan_device, heaps)
    assert 0 < vulkan_device.free_bytes <= vulkan_device.total_bytes
    text, mmproj = tiny_pair
    assert main(["models", "fit", "--text", text, "--mmproj", mmproj, "--ctx", "2048", "--json", "--no-tool"]) == 0
    tiny = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in tiny["devices"]] == [vulkan_device.name]
    assert tiny["n_gpu_layers"] == 3 and tiny["mmproj_on_gpu"]
    assert main(["models", "fit", "spec-o3-7b", "--ctx", "4096", "--json", "--no-tool"]) in (0, 1)
    big = json.loads(capsys.readouterr().out)
    device = big["devices"][0]
    assert device["name"] == vulkan_device.name and device["free_bytes"] <= heaps[0]
    assert 0 < big["n_gpu_layers"] < big["n_layers"], big["summary"]  # a partial offload sized to the device
    assert big["gpu_needed_bytes"] <= device["free_bytes"]
    print(big["summary"])


LADDER = textwrap.dedent("""
    import json, logging, sys
    from speco3.engine.base import EngineSettings
    from speco3.engine.llama import LlamaMtmdEngine
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    engine = LlamaMtmdEngine(sys.argv[1], sys.argv[2], EngineSettings(n_ctx=1024, flash_attn=False, kv_type="f32",
                             n_threads=2, n_gpu_layers=None, mmproj_on_gpu=True), warmup=False, n_batch=128)
    engine.load()
    engine.extend(["<|im_start|>user\\nIs this a quasar?<|im_end|>\\n<|im_start|>assistant\\n"])
    n = engine.generate(max_tokens=4).n_tokens
    st = engine.stats()
    print(json.dumps({"n_gpu_layers": st.extra["n_gpu_layers"], "fit": st.extra["fit"], "backend": st.backend,
                      "tokens": n}))
""")


def test_retry_ladder_on_a_refused_allocation(vulkan_device, tiny_pair):
    """The ladder meets a real refusal: ``GGML_VK_FORCE_MAX_BUFFER_SIZE`` caps one Vulkan buffer below the size of
    one layer's KV cache (1024 cells x 2 KV heads x 64 x 4 bytes = 512 KiB), so every load with a layer on the
    device fails in llama.cpp's KV allocation (3 layers, then 1) and the engine ends on the CPU. (The cap has to
    be set before ggml creates the device, hence a fresh process. Lavapipe cannot be made to refuse some layers
    but not fewer: the KV cache of one layer is the unit that fails; see the README, "GPU backends".)"""
    env = {**os.environ, "GGML_VK_FORCE_MAX_BUFFER_SIZE": str(256 * 1024), "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", LADDER, *tiny_pair], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "loading with 3 GPU layers failed" in proc.stderr and "retrying with 1" in proc.stderr, proc.stderr
    assert "loading with 1 GPU layers failed" in proc.stderr and "retrying with 0" in proc.stderr
    assert "loaded with 0 GPU layers instead of the planned 3" in proc.stderr
    assert out["n_gpu_layers"] == 0 and out["backend"] == "CPU" and out["fit"].startswith("CPU only")
    assert out["tokens"] > 0


def test_self_test_and_log_name_the_device(vulkan_device, tiny_pair, caplog):
    from speco3.selftest import check_llama

    summary, info = check_llama(require_gpu=True)
    assert "Vulkan" in info["backends_built"]
    assert f"runs on {vulkan_device.name} ({vulkan_device.description})" in summary, summary
    assert f"Vulkan:{vulkan_device.name} ({vulkan_device.description})" in summary
    with caplog.at_level(logging.INFO, logger="speco3.engine"):
        engine = LlamaMtmdEngine(*tiny_pair, EngineSettings(**TIGHT, n_gpu_layers=-1), warmup=False)
        engine.load()
        engine.close()
    loaded = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("loaded "))
    assert f"on {vulkan_device.name} ({vulkan_device.description})" in loaded
    assert f"2/2 layers on the GPU {vulkan_device.name} ({vulkan_device.description})" in loaded


def test_self_test_without_a_usable_device_says_so(tiny_pair):
    """With lavapipe hidden again (ggml's default for CPU-type Vulkan devices) the same build runs on the CPU and
    self-test says that no GPU device was found."""
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    code = ("from speco3.selftest import check_llama; s, i = check_llama(); print(s); "
            "assert i['backend'] == 'CPU', s; assert 'GPU offload no GPU device found' in s, s")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert shutil.which("vulkaninfo")  # the device is there; only ggml skips it


def test_status_bar_names_the_device(vulkan_device, tiny_pair, qtbot):
    """What the app shows: the status-bar message after the load (`InferenceThread.engine_status`, shown by the
    main window's status bar) and the backend the agent panel's status line names during a run."""
    from speco3.engine.choice import InstalledModel
    from speco3.vetting.runs import EngineStatus, RunJob, RunService

    shown: list[str] = []
    service = RunService(lambda event: shown.append(event.text) if isinstance(event, EngineStatus) else None)
    job = RunJob(key="spectrum", item=None, screening=None, engine_key=InstalledModel("tiny-f32").engine_key(EngineSettings()),
                 engine_factory=lambda: LlamaMtmdEngine(*tiny_pair, EngineSettings(**TIGHT, n_gpu_layers=-1),
                                                        warmup=False))
    try:
        engine = service.engine_for(job)  # on this thread, as the serving thread would
        backend = engine.stats().backend  # what `RunInfo.backend` says, shown in the agent panel's status line
    finally:
        service.close_engine()
    assert shown[0] == "loading tiny-f32 …"
    assert shown[-1].startswith("tiny-f32 loaded in ")
    assert f"2/2 layers on the GPU {vulkan_device.name} ({vulkan_device.description})" in shown[-1]
    assert backend == f"{vulkan_device.name} ({vulkan_device.description})"
