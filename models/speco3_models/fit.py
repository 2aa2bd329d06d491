"""Will a model fit this machine? Memory estimate of a Qwen2.5-VL pair and the load plan that fits it.

All figures are what loading adds to the running process (its peak resident memory grows by the estimate's
total): free memory is measured while the app or the CLI is already running. `ModelShape` is what the estimate
needs from a text GGUF and its projector (read with the bounded scan, `speco3_models.gguf_scan`), or from the
catalog before anything is downloaded (`speco3_models.shape`). `estimate` turns a shape, a
context size and a KV type into `MemoryEstimate` parts: weights (per layer, the output layer, the token
embeddings, which llama.cpp keeps on the CPU), the KV cache, llama.cpp's compute buffers, the projector and its
encoder's compute buffer. `plan_fit` is a pure function of an estimate and the free memory figures
(`DeviceMemory`): it chooses ``n_gpu_layers`` with a margin per device, puts the projector on a GPU only if it
fits there, lowers the context when nothing else fits (and says so), or refuses with the figures.

llama.cpp's own fitting (``llama-fit-params``, `speco3_models.fit_tool`) is the reference for the llama parts;
the tests check this estimator against it.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from speco3_models.shape import QUANT_BITS, ModelShape, shape_from_catalog  # noqa: F401 - re-exported

GIB = 1024**3
MIB = 1024**2
#: Bytes per KV cache element for each KV type (q8_0: 34 bytes per block of 32).
KV_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32}
#: Free memory left untouched on each GPU and in RAM (llama.cpp's --fit-target default is 1 GiB per device).
GPU_MARGIN = 1 * GIB
HOST_MARGIN = 512 * MIB
#: Smallest context the agent works with (one capped image, the prompt and an answer); plans never go below it.
MIN_CTX = 4096
#: llama.cpp's and mtmd's fixed allocations besides the buffers counted apart (graph metadata, thread pools, image
#: preprocessing, sampler): 29 MiB measured on the tiny model on Linux (peak RSS increase minus the parts).
RUNTIME_OVERHEAD = 32 * MIB
#: Vision encoder bytes per pair of patches: attention masks with flash attention; masks besides the scores of
#: every head (4 bytes each) without it. Measured on the tiny model at 5,076 patches (tests/engine/test_fit_rss.py).
#: KV cells an inspection typically fills (a few images at the cap and the turns): the attention buffers touched.
TYPICAL_CELLS = 4096
VISION_PAIR_BYTES_FA = 7
VISION_PAIR_BYTES_NO_FA = 5


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a loaded model needs, in parts (all layers counted; `split` divides them between GPU and host)."""

    n_ctx: int
    kv_type: str
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    output_buffer_bytes: int
    projector_bytes: int
    projector_compute_bytes: int
    overhead_bytes: int
    image_cache_bytes: int = 0  # the engine's cache of vision-encoder outputs when full
    reserved_compute: int = 0  # the text compute buffer as allocated (a GPU holds all of it)

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_bytes + self.compute_bytes + self.output_buffer_bytes
                + self.projector_bytes + self.projector_compute_bytes + self.overhead_bytes + self.image_cache_bytes)

    def parts(self) -> dict[str, int]:
        d = asdict(self)
        return {k: v for k, v in d.items() if k.endswith("_bytes")} | {"total_bytes": self.total_bytes}


def _pad(n: int, to: int = 256) -> int:
    return ((n + to - 1) // to) * to


def estimate(shape: ModelShape, n_ctx: int, *, kv_type: str = "f16", flash_attn: bool = True, n_ubatch: int = 512,
             image_max_tokens: int = 1280, image_cache_bytes: int = 0) -> MemoryEstimate:
    """Memory of ``shape`` loaded with an ``n_ctx`` context (one sequence): what the process's peak RSS grows by.

    The KV cache is exact (llama.cpp pads the context to 256 cells). The text compute buffer as llama.cpp reserves
    it (``reserved_compute``, what a GPU allocates; checked against llama-fit-params) is the larger of two phases
    of the graph for one micro-batch of ``n_ubatch`` tokens: the layers (FFN activations, the KQ mask over the
    whole context and, without flash attention, every head's scores) or the output (``n_ubatch`` rows of logits).
    What RAM holds of it (``compute_bytes``) is what a batch touches: one row of logits (the agent asks for the
    last token's only) and the mask over the cells an inspection uses (`TYPICAL_CELLS`). The vision
    encoder's buffers are for one image at ``image_max_tokens`` tokens (4 patches per token): activations per
    patch plus attention masks over all patch pairs (and the scores of every head without flash attention);
    the per-pair coefficients were measured on the tiny model (``tests/engine/test_fit_rss.py``).
    ``image_cache_bytes`` is the bound of the engine's cache of vision-encoder outputs (host memory).
    """
    if kv_type not in KV_BYTES:
        raise ValueError(f"unknown KV type {kv_type!r}; use one of {sorted(KV_BYTES)}")
    ctx = _pad(max(1, int(n_ctx)))
    kv = int(shape.n_layers * ctx * 2 * shape.n_head_kv * shape.head_dim * KV_BYTES[kv_type])
    ub = min(int(n_ubatch), ctx)
    per_cell = 2 if flash_attn else 4 * shape.n_head + 4  # KQ mask (f16 with flash attention; f32 + f32 scores)
    activations = ub * 4 * (2 * shape.n_ff + 4 * shape.n_embd)
    output_phase = ub * shape.n_embd * 8  # the graph's end: the last hidden states before the output matmul
    # llama.cpp reserves the larger of the two phases of the graph (its allocator reuses memory between them)
    reserved = max(output_phase + ub * shape.n_vocab * 4, activations + ub * ctx * per_cell)
    resident = max(output_phase + shape.n_vocab * 4, activations + ub * min(ctx, TYPICAL_CELLS) * per_cell)
    patches = 4 * int(image_max_tokens)
    per_pair = VISION_PAIR_BYTES_FA if flash_attn else 4 * shape.vision_heads + VISION_PAIR_BYTES_NO_FA
    vis = patches * 4 * (3 * shape.vision_hidden + 2 * shape.vision_ff) + patches * patches * per_pair
    return MemoryEstimate(
        n_ctx=ctx, kv_type=kv_type, weights_bytes=shape.weights_bytes, kv_bytes=kv,
        compute_bytes=resident, output_buffer_bytes=shape.n_vocab * 4,
        projector_bytes=shape.projector_bytes, projector_compute_bytes=vis if shape.projector_bytes else 0,
        overhead_bytes=RUNTIME_OVERHEAD, image_cache_bytes=int(image_cache_bytes) if shape.projector_bytes else 0,
        reserved_compute=reserved,
    )


@dataclass(frozen=True)
class DeviceMemory:
    """Free and total memory of one device (``kind`` GPU, IGPU or ACCEL; the host is given separately)."""

    name: str
    free_bytes: int
    total_bytes: int
    kind: str = "GPU"
    description: str = ""


@dataclass(frozen=True)
class FitPlan:
    """How to load a model on this machine, or why it cannot be loaded."""

    fits: bool
    n_gpu_layers: int  # llama.cpp's count: n_layers + 1 puts the output layer on the GPU too
    n_layers: int
    mmproj_on_gpu: bool
    n_ctx: int
    n_ctx_requested: int
    estimate: MemoryEstimate
    host_needed_bytes: int
    host_free_bytes: int | None
    gpu_needed_bytes: int = 0
    devices: tuple[DeviceMemory, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    message: str = ""
    source: str = "estimate"  # or "llama-fit-params" when llama.cpp's figures were used
    use_mmap: bool = False  # map the text GGUF (llama.cpp's default) rather than read it into memory
    mapped_bytes: int = 0  # the text GGUF's tensor bytes: what a mapped load's page cache adds to its peak RSS

    @property
    def context_reduced(self) -> bool:
        return self.n_ctx < self.n_ctx_requested

    @property
    def gpu_layers_shown(self) -> int:
        """Offloaded blocks (the output layer is not a block)."""
        return min(self.n_gpu_layers, self.n_layers)

    def summary(self) -> str:
        """One line for people: 'fits on this machine: GPU 28/28 layers' or 'CPU only, 6.4 GiB'."""
        if not self.fits:
            return self.message
        total = format_gib(self.estimate.total_bytes)
        if self.n_gpu_layers > 0:
            where = f"GPU {self.gpu_layers_shown}/{self.n_layers} layers" + ("" if self.mmproj_on_gpu else ", projector on CPU")
        else:
            where = "CPU only"
        text = f"fits on this machine: {where}, {total}"
        if self.context_reduced:
            text += f" (context lowered from {self.n_ctx_requested} to {self.n_ctx})"
        return text

    def to_dict(self) -> dict:
        return {
            "fits": self.fits, "n_gpu_layers": self.n_gpu_layers, "n_layers": self.n_layers,
            "mmproj_on_gpu": self.mmproj_on_gpu, "n_ctx": self.n_ctx, "n_ctx_requested": self.n_ctx_requested,
            "context_reduced": self.context_reduced, **self.estimate.parts(), "kv_type": self.estimate.kv_type,
            "host_needed_bytes": self.host_needed_bytes, "host_free_bytes": self.host_free_bytes,
            "gpu_needed_bytes": self.gpu_needed_bytes,
            "devices": [asdict(d) for d in self.devices], "notes": list(self.notes), "summary": self.summary(),
            "source": self.source, "use_mmap": self.use_mmap, "mapped_bytes": self.mapped_bytes,
        }


def format_gib(n: float) -> str:
    """``7.9 GiB``; below 1 GiB in MiB (``210 MiB``)."""
    return f"{n / GIB:.1f} GiB" if abs(n) >= GIB else f"{n / MIB:.0f} MiB"


def _gpu_layers(shape: ModelShape, est: MemoryEstimate, budgets: list[int]) -> tuple[int, int, list[int]]:
    """Greedy layer placement over the GPUs: ``(n_gpu_layers, bytes on GPUs, budgets left)``."""
    kv_layer = est.kv_bytes // max(1, shape.n_layers)
    left = list(budgets)
    compute = max(est.compute_bytes, est.reserved_compute)  # a GPU allocates the whole buffer
    if not left or max(left) < compute:
        return 0, 0, left
    used = 0
    main = max(range(len(left)), key=lambda i: left[i])  # the compute buffer lives on the main GPU
    left[main] -= compute
    used += compute
    n = 0
    dev = 0
    costs = [b + kv_layer for b in shape.layer_bytes] + [shape.output_bytes + est.output_buffer_bytes]
    for cost in costs:
        while dev < len(left) and left[dev] < cost:
            dev += 1
        if dev == len(left):
            break
        left[dev] -= cost
        used += cost
        n += 1
    if n == 0:
        return 0, 0, list(budgets)
    return n, used, left


def plan_fit(shape: ModelShape, n_ctx: int, host_free: int | None, gpus: Sequence[DeviceMemory] = (), *,
             estimator: Callable[[int], MemoryEstimate] | None = None, kv_type: str = "f16",
             flash_attn: bool = True, want_gpu: bool = True, want_projector_gpu: bool = True,
             lower_ctx: bool = True, min_ctx: int = MIN_CTX, gpu_margin: int = GPU_MARGIN,
             host_margin: int = HOST_MARGIN, n_gpu_layers: int | None = None,
             image_max_tokens: int = 1280, mmap: bool | None = None, image_cache_bytes: int = 0) -> FitPlan:
    """Choose ``n_gpu_layers``, where the projector goes and the context, for the free memory given.

    Contexts tried: ``n_ctx``, then (with ``lower_ctx``) halved down to ``min_ctx``; the first that fits wins and
    the lowered context is noted. ``host_free`` None means unknown (assumed enough). ``n_gpu_layers`` fixes the
    layer count (the user chose it) instead of fitting it. ``mmap`` True/False forces the load mode, None lets
    `choose_mmap` decide. Pure: no file, device or clock is read.
    """
    est_fn = estimator or (lambda c: estimate(shape, c, kv_type=kv_type, flash_attn=flash_attn,
                                              image_max_tokens=image_max_tokens, image_cache_bytes=image_cache_bytes))
    gpus = tuple(g for g in gpus if g.kind in ("GPU", "IGPU", "ACCEL")) if want_gpu else ()
    ctxs = [int(n_ctx)]
    while ctxs[-1] // 2 >= min_ctx:
        ctxs.append(ctxs[-1] // 2)

    def place(ctx: int) -> FitPlan:
        est = est_fn(ctx)
        budgets = [max(0, g.free_bytes - gpu_margin) for g in gpus]
        if n_gpu_layers is not None and gpus:
            ngl = shape.n_layers + 1 if n_gpu_layers < 0 else min(int(n_gpu_layers), shape.n_layers + 1)
            blocks = min(ngl, shape.n_layers)
            gpu_used = (sum(shape.layer_bytes[shape.n_layers - blocks:]) + blocks * est.kv_bytes // shape.n_layers
                        + (shape.output_bytes if ngl > shape.n_layers else 0)
                        + (max(est.compute_bytes, est.reserved_compute) if ngl else 0))
            left = [sum(budgets) - gpu_used]
        else:
            ngl, gpu_used, left = _gpu_layers(shape, est, budgets)
        proj_need = est.projector_bytes + est.projector_compute_bytes
        proj_gpu = bool(ngl and want_projector_gpu and left and max(left) >= proj_need)
        gpu_used += proj_need if proj_gpu else 0
        host = est.total_bytes - gpu_used + (est.output_buffer_bytes if ngl else 0)  # host copy of the logits
        return FitPlan(fits=host_free is None or host <= host_free - host_margin, n_gpu_layers=ngl,
                       n_layers=shape.n_layers, mmproj_on_gpu=proj_gpu, n_ctx=ctx, n_ctx_requested=int(n_ctx),
                       estimate=est, host_needed_bytes=host, host_free_bytes=host_free, gpu_needed_bytes=gpu_used,
                       devices=gpus)

    first = place(ctxs[0])
    for ctx in ctxs if lower_ctx else ctxs[:1]:
        plan = first if ctx == ctxs[0] else place(ctx)
        if plan.fits:
            notes = []
            if plan.context_reduced:
                notes.append(f"context lowered from {n_ctx} to {plan.n_ctx} tokens to fit in memory")
            if gpus and n_gpu_layers is None and plan.n_gpu_layers < shape.n_layers + 1:  # not what the user chose
                notes.append(f"{plan.gpu_layers_shown}/{shape.n_layers} layers on the GPU (free GPU memory: "
                             f"{format_gib(sum(g.free_bytes for g in gpus))})")
            if plan.n_gpu_layers and not plan.mmproj_on_gpu and want_projector_gpu:
                notes.append("vision projector on the CPU (not enough GPU memory left for it)")
            use_mmap = choose_mmap(shape, plan, host_margin) if mmap is None else bool(mmap)
            if mmap is None and not use_mmap:
                notes.append("model file read into memory instead of mapped (no room for the mapped file beside "
                             "the loaded weights): a slower load, a lower peak")
            return replace(plan, notes=tuple(notes), use_mmap=use_mmap, mapped_bytes=shape.weights_bytes)
    smaller = next((c for c in ctxs[1:] if place(c).fits), None) if not lower_ctx else None
    return replace(first, message=refusal_message(shape, first, smaller))


def choose_mmap(shape: ModelShape, plan: FitPlan, host_margin: int = HOST_MARGIN) -> bool:
    """Map the text GGUF (fast: llama.cpp's default) when its pages fit in free memory beside everything the load
    keeps; otherwise read it (slower, lower peak).

    On the CPU llama.cpp repacks most weights into its own buffers; with a map, the file's pages stay resident beside
    them during the load, so the peak is the plan's host bytes plus up to the whole text file (clean page cache the
    system can drop, but resident). Reading copies each tensor through a buffer instead: measured on a 7B Q4_K_M at
    16k (benchmarks/bench_load.py) it takes ~1.5-2x as long and peaks ~3 GiB lower. Unknown free memory: map.
    """
    if plan.host_free_bytes is None:
        return True
    return plan.host_needed_bytes + shape.weights_bytes <= plan.host_free_bytes - host_margin


def refusal_message(shape: ModelShape, plan: FitPlan, smaller_ctx: int | None = None) -> str:
    """'the model needs 7.9 GiB, 5.1 GiB free; try Q4_K_M or a 8k context' (figures of the requested context)."""
    free = plan.host_free_bytes or 0
    gpu_free = sum(g.free_bytes for g in plan.devices)
    where = f"{format_gib(free)} free" + (f" (+ {format_gib(gpu_free)} free on the GPU)" if gpu_free else "")
    tries = []
    if QUANT_BITS.get(shape.quant.upper(), 0.0) > QUANT_BITS["Q4_K_M"] + 0.5:
        tries.append("Q4_K_M")
    est = plan.estimate
    if est.kv_type != "q8_0" and not plan.devices:  # a q8_0 KV cache: about half the f16 bytes, tiny quality cost
        saved = est.kv_bytes - int(est.kv_bytes * KV_BYTES["q8_0"] / KV_BYTES[est.kv_type])
        if plan.host_needed_bytes - saved <= free - HOST_MARGIN:
            tries.append("a q8_0 KV cache (--kv-type q8_0)")
    if smaller_ctx:
        tries.append(f"a {smaller_ctx // 1024}k context")
    tail = f"; try {' or '.join(tries)}" if tries else "; this machine does not have the memory for this model"
    return (f"{shape.name} needs {format_gib(plan.host_needed_bytes)} at a {plan.n_ctx_requested}-token context, "
            f"{where}{tail}")


def retry_layers(n_gpu_layers: int, n_layers: int) -> list[int]:
    """Layer counts to try after a GPU load failed at ``n_gpu_layers``: half as many, a quarter, then CPU."""
    n = n_layers + 1 if n_gpu_layers < 0 else min(n_gpu_layers, n_layers + 1)
    out = []
    for k in (n // 2, n // 4, 0):
        if k < n and k not in out:
            out.append(k)
    return out


def ceil_mib(n: int) -> int:
    return math.ceil(n / MIB)


def host_available_bytes() -> int | None:
    """RAM available to a new allocation without swapping (the platform's own figure), or None when unknown.

    Linux: ``MemAvailable`` (and the cgroup limit when lower); Windows: ``ullAvailPhys``; macOS: free +
    inactive + speculative pages. llama.cpp's CPU device reports all RAM as free, so it is not asked.
    """
    try:
        if sys.platform.startswith("linux"):
            with open("/proc/meminfo") as f:
                info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.count(":") == 1}
            avail = info.get("MemAvailable", info.get("MemFree"))
            limit = _cgroup_limit()
            return min(avail, limit) if avail is not None and limit else avail
        if sys.platform == "win32":
            import ctypes

            class _Status(ctypes.Structure):
                _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong)] + [
                    (n, ctypes.c_ulonglong) for n in ("total", "avail", "tpage", "apage", "tvirt", "avirt", "aext")]

            st = _Status()
            st.dwLength = ctypes.sizeof(_Status)
            return int(st.avail) if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(st)) else None
        if sys.platform == "darwin":
            out = subprocess.run(["vm_stat"], capture_output=True, text=True, timeout=5, check=True).stdout
            page = int(out.split("page size of")[1].split()[0])
            pages = {k.strip(): int(v.strip().rstrip(".")) for k, v in
                     (line.split(":", 1) for line in out.splitlines()[1:] if ":" in line)}
            return page * sum(pages.get(k, 0) for k in ("Pages free", "Pages inactive", "Pages speculative"))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    return None


def _cgroup_limit() -> int | None:
    """The cgroup v2 memory limit minus what the cgroup uses, when a limit is set (containers)."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)
