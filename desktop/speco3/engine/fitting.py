"""Fit the model to this machine before loading it, and the fall-back when a GPU load fails anyway.

The decision is `speco3_models.fit.plan_fit` (a pure function) fed with this machine's figures: free RAM from
the platform (`speco3_models.fit.host_available_bytes`) and, per GPU, free device memory from ggml's backend
device API (`speco3.engine.native.list_devices`). On a machine with a GPU the text model's parts come from
llama.cpp itself (``llama-fit-params``, `speco3_models.fit_tool`) when the tool is installed; on the CPU, and
without the tool, from the built-in estimator (checked against the tool in the tests).

`load_attempts` is the retry ladder: the planned layer count, then fewer layers, then the CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from speco3.engine import native
from speco3.engine.base import EngineSettings
from speco3.engine.mtmd_image import EmbeddingCache
from speco3.errors import EngineError, ModelFileError
from speco3.imaging import effective_max_tokens
from speco3_models.fit import (
    DeviceMemory,
    FitPlan,
    ModelShape,
    format_gib,
    host_available_bytes,
    plan_fit,
    retry_layers,
)

logger = logging.getLogger(__name__)


class ModelTooLargeError(EngineError):
    """The model cannot fit this machine's memory (raised before anything is loaded; the message has figures)."""

    def __init__(self, plan: FitPlan):
        super().__init__(plan.message)
        self.plan = plan


def machine_memory(devices: list[native.Device] | None = None) -> tuple[int | None, list[DeviceMemory]]:
    """``(free RAM, [free memory of each GPU])`` of this machine."""
    devices = native.list_devices() if devices is None else devices
    gpus = [DeviceMemory(d.name, d.free_bytes, d.total_bytes, d.kind, d.description)
            for d in devices if d.kind in ("GPU", "IGPU", "ACCEL")]
    return host_available_bytes(), gpus


def plan_load(text_path: str | Path, mmproj_path: str | Path, settings: EngineSettings, *,
              gpu_offload: bool | None = None, use_tool: bool | None = None,
              devices: list[native.Device] | None = None) -> FitPlan:
    """The load plan for a model pair under ``settings`` on this machine (nothing is loaded).

    ``gpu_offload`` None asks llama.cpp whether this build can offload; ``use_tool`` None runs llama-fit-params
    only when a GPU is present (on the CPU the estimate decides alone and costs no subprocess).
    """
    if gpu_offload is None:
        llama, _ = native.import_llama()
        gpu_offload = bool(llama.llama_supports_gpu_offload())
    host_free, gpus = machine_memory(devices) if gpu_offload else (host_available_bytes(), [])
    shape = ModelShape.from_gguf(text_path, mmproj_path)
    estimator = None
    if use_tool if use_tool is not None else bool(gpus):
        from speco3_models.fit_tool import llama_estimator

        estimator = llama_estimator(shape, text_path, kv_type=settings.kv_type, flash_attn=settings.flash_attn,
                                    image_max_tokens=image_cap(settings), image_cache_bytes=cache_bound(settings, shape))
    plan = plan_fit(shape, int(settings.n_ctx), host_free, gpus, estimator=estimator, kv_type=settings.kv_type,
                    flash_attn=settings.flash_attn, want_gpu=gpu_offload, want_projector_gpu=settings.mmproj_on_gpu,
                    n_gpu_layers=settings.n_gpu_layers, image_max_tokens=image_cap(settings), mmap=settings.use_mmap,
                    image_cache_bytes=cache_bound(settings, shape))
    if estimator is not None:
        from dataclasses import replace

        plan = replace(plan, source="llama-fit-params")
    return plan


def cache_bound(settings: EngineSettings, shape: ModelShape, image_tokens: int | None = None) -> int:
    """Bytes the engine's cache of vision-encoder outputs holds at most (`EmbeddingCache.bound`)."""
    return EmbeddingCache.bound(settings.image_cache_mib * 2**20, image_tokens or image_cap(settings), shape.n_embd)


def image_cap(settings: EngineSettings) -> int:
    """Image tokens per image the estimate plans for: the cap the engine gives mtmd (`effective_max_tokens`)."""
    return effective_max_tokens(settings.image_max_tokens)


def load_attempts(plan: FitPlan) -> list[int]:
    """Layer counts to try in order: the plan's, then (after a failed GPU load) fewer, then 0 (CPU)."""
    return [plan.n_gpu_layers, *retry_layers(plan.n_gpu_layers, plan.n_layers)] if plan.n_gpu_layers else [0]


def load_with_fallback(plan: FitPlan, load: Callable[[int], None], cleanup: Callable[[], None]) -> int:
    """Call ``load(n_gpu_layers)`` down the `load_attempts` ladder until one succeeds; ``cleanup()`` after each
    failure. Returns the layer count that loaded; the last failure (or any non-engine error) propagates."""
    attempts = load_attempts(plan)
    for i, ngl in enumerate(attempts):
        try:
            load(ngl)
        except BaseException as exc:
            cleanup()
            if i == len(attempts) - 1 or not isinstance(exc, (EngineError, ModelFileError)):
                raise
            logger.warning("loading with %d GPU layers failed (%s); retrying with %d", ngl, exc, attempts[i + 1])
            continue
        for note in plan.notes:
            logger.warning("%s", note)
        if ngl != plan.n_gpu_layers:
            logger.warning("loaded with %d GPU layers instead of the planned %d", ngl, plan.n_gpu_layers)
        return ngl
    raise AssertionError("unreachable: load_attempts is never empty")


def describe(plan: FitPlan, n_gpu_layers: int) -> str:
    """What was chosen, for the log and the user: layers, projector, context and the estimate."""
    gpu = plan.devices[0] if plan.devices else None  # the device llama.cpp offloads to first (ggml's order)
    named = f" {gpu.name}" + (f" ({gpu.description})" if gpu.description else "") if gpu else ""
    where = (f"{min(n_gpu_layers, plan.n_layers)}/{plan.n_layers} layers on the GPU{named}" if n_gpu_layers
             else "CPU only")
    if n_gpu_layers and n_gpu_layers != plan.n_gpu_layers:
        where += f" (after a failed load with {plan.gpu_layers_shown})"
    proj = ", projector on the GPU" if plan.mmproj_on_gpu and n_gpu_layers else ""
    ctx = f", context {plan.n_ctx}" + (f" (lowered from {plan.n_ctx_requested})" if plan.context_reduced else "")
    load = "mapped" if plan.use_mmap else "read into memory"
    return f"{where}{proj}{ctx}, model file {load}; estimated {format_gib(plan.estimate.total_bytes)} ({plan.source})"


def plan_model(name: str | None = None, text: str | Path | None = None, mmproj: str | Path | None = None, *,
               settings: EngineSettings | None = None, store=None, use_tool: bool = True,
               quant: str | None = None) -> tuple[FitPlan, list[native.Device]]:
    """The plan for an installed model (by name; None: the default), a catalog model not downloaded yet (its
    catalog shape), or an explicit ``text`` + ``mmproj`` pair; with the devices seen. For `spec-o3 models fit`
    and the model manager. ``use_tool``: let llama-fit-params give the text model's parts when installed."""
    from speco3_models import catalog
    from speco3_models.errors import ModelStoreError
    from speco3_models.fit import shape_from_catalog
    from speco3_models.store import ModelStore

    settings = settings or EngineSettings()
    try:
        native.ensure_backend()
        llama, _ = native.import_llama()
        gpu_offload, devices = bool(llama.llama_supports_gpu_offload()), native.list_devices()
    except EngineError:  # no llama-cpp-python: plan for the CPU from the files alone
        gpu_offload, devices = False, []
    if text is None and mmproj is None:
        entry = catalog.find(name) if name else None
        installed = None
        try:
            installed = (store or ModelStore()).get(name) if name else (store or ModelStore()).default()
        except ModelStoreError:
            if entry is None:
                raise
        if installed is None and entry is not None:
            host_free, gpus = machine_memory(devices) if gpu_offload else (host_available_bytes(), [])
            shape = shape_from_catalog(entry, quant)
            cap = settings.image_max_tokens or entry.image_max_tokens or image_cap(settings)
            plan = plan_fit(shape, settings.n_ctx, host_free, gpus, kv_type=settings.kv_type,
                            flash_attn=settings.flash_attn, want_gpu=gpu_offload,
                            want_projector_gpu=settings.mmproj_on_gpu, n_gpu_layers=settings.n_gpu_layers,
                            image_max_tokens=cap, image_cache_bytes=cache_bound(settings, shape, cap))
            return plan, devices
        if installed is None:
            raise ModelStoreError("no model installed and no catalog name given")
        text, mmproj = installed.text_path, installed.mmproj_path
    if text is None or mmproj is None:
        raise EngineError("give both the text GGUF and its projector (--text and --mmproj)")
    native.check_model_files(text, mmproj)
    return plan_load(text, mmproj, settings, gpu_offload=gpu_offload, use_tool=use_tool, devices=devices), devices
