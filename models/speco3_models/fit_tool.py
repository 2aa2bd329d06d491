"""llama.cpp's own memory fitting, run as a subprocess: ``llama-fit-params`` (``tools/fit-params``).

llama-cpp-python does not expose ``llama_params_fit`` / ``common_fit_params``; ``scripts/build-llama-tools.sh``
builds the tool from the llama.cpp sources vendored in the installed llama-cpp-python's sdist (the same code as
the engine), and the Linux bundle ships it next to the app. `find_fit_params` looks for it in this order:

1. ``SPECO3_LLAMA_FIT_PARAMS`` (the binary) or ``SPECO3_LLAMA_TOOLS`` (the build script's cache folder);
2. next to the application (a frozen bundle: the executable's folder and its ``llama-tools`` subfolder);
3. the build script's cache, ``${XDG_CACHE_HOME:-~/.cache}/speco3/llama-tools/<llama-cpp-python version>/bin``.

When it is absent the estimator in `speco3_models.fit` answers alone (the tests check it against the tool).
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from speco3_models.fit import MIB, MemoryEstimate, ModelShape, estimate

logger = logging.getLogger(__name__)

TOOL = "llama-fit-params" + (".exe" if os.name == "nt" else "")


def llama_cpp_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("llama-cpp-python")
    except PackageNotFoundError:
        return None


def find_fit_params() -> Path | None:
    """Path of a usable ``llama-fit-params`` binary, or None (see the module docstring for the order)."""
    candidates: list[Path] = []
    if os.environ.get("SPECO3_LLAMA_FIT_PARAMS"):
        candidates.append(Path(os.environ["SPECO3_LLAMA_FIT_PARAMS"]))
    if os.environ.get("SPECO3_LLAMA_TOOLS"):
        candidates.append(Path(os.environ["SPECO3_LLAMA_TOOLS"]) / "bin" / TOOL)
    if getattr(sys, "frozen", False):
        here = Path(getattr(sys, "_MEIPASS", Path(sys.executable).parent))
        candidates += [Path(sys.executable).parent / TOOL, here / "llama-tools" / TOOL, here / TOOL]
    ver = llama_cpp_version()
    if ver:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        candidates.append(cache / "speco3" / "llama-tools" / ver / "bin" / TOOL)
    return next((p for p in candidates if p.is_file() and os.access(p, os.X_OK)), None)


@dataclass(frozen=True)
class FitPrint:
    """``llama-fit-params --fit-print on``: MiB of model weights, context (KV cache) and compute buffers per device
    (``Host`` last) for the given settings."""

    rows: dict[str, tuple[int, int, int]]
    n_ctx: int

    def total_mib(self) -> int:
        return sum(sum(r) for r in self.rows.values())

    def part_mib(self, index: int) -> int:
        return sum(r[index] for r in self.rows.values())


def _args(text_path, n_ctx: int, kv_type: str, flash_attn: bool, n_gpu_layers: int | None, n_batch: int) -> list[str]:
    args = ["-m", str(text_path), "-c", str(int(n_ctx)), "-ctk", kv_type, "-ctv", kv_type,
            "-fa", "on" if flash_attn else "off", "-b", str(n_batch), "-ub", str(n_batch), "-np", "1"]
    if n_gpu_layers is not None:
        args += ["-ngl", str(int(n_gpu_layers))]
    return args


def _run(tool: Path, args: list[str], timeout: float) -> str:
    proc = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise RuntimeError(f"{tool.name} exited with {proc.returncode}: {tail}")
    return proc.stdout


def fit_print(text_path, n_ctx: int, *, kv_type: str = "f16", flash_attn: bool = True,
              n_gpu_layers: int | None = 0, n_batch: int = 512, tool: Path | None = None,
              timeout: float = 120.0) -> FitPrint | None:
    """llama.cpp's projected memory for the text model, or None when the tool is absent or fails (logged)."""
    tool = tool or find_fit_params()
    if tool is None:
        return None
    try:
        out = _run(tool, [*_args(text_path, n_ctx, kv_type, flash_attn, n_gpu_layers, n_batch), "-fitp", "on"], timeout)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        logger.warning("llama-fit-params failed, using the built-in estimate: %s", exc)
        return None
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            rows[parts[0]] = (int(parts[1]), int(parts[2]), int(parts[3]))
    if "Host" not in rows:
        logger.warning("llama-fit-params printed no memory figures: %r", out[:200])
        return None
    return FitPrint(rows, int(n_ctx))


def fit_args(text_path, n_ctx: int, *, kv_type: str = "f16", flash_attn: bool = True, n_batch: int = 512,
             min_ctx: int = 4096, margin_mib: int = 1024, tool: Path | None = None,
             timeout: float = 120.0) -> tuple[int, int] | None:
    """llama.cpp's own choice ``(n_ctx, n_gpu_layers)`` for the free device memory (GPU builds), or None."""
    tool = tool or find_fit_params()
    if tool is None:
        return None
    args = [*_args(text_path, n_ctx, kv_type, flash_attn, None, n_batch), "-fitc", str(min_ctx), "-fitt", str(margin_mib)]
    try:
        words = _run(tool, args, timeout).split()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        logger.info("llama-fit-params could not fit: %s", exc)
        return None
    try:
        return int(words[words.index("-c") + 1]), int(words[words.index("-ngl") + 1])
    except (ValueError, IndexError):
        return None


def llama_estimator(shape: ModelShape, text_path, *, kv_type: str = "f16", flash_attn: bool = True,
                    image_max_tokens: int = 1280, image_cache_bytes: int = 0, tool: Path | None = None):
    """An estimator for `plan_fit` whose text-model weights, KV cache and allocated compute buffer are llama.cpp's
    (``fit_print`` at each context) and whose projector, runtime and resident compute parts are ours; None when
    the tool is not available."""
    tool = tool or find_fit_params()
    if tool is None:
        return None

    def est(n_ctx: int) -> MemoryEstimate:
        ours = estimate(shape, n_ctx, kv_type=kv_type, flash_attn=flash_attn, image_max_tokens=image_max_tokens,
                        image_cache_bytes=image_cache_bytes)
        fp = fit_print(text_path, n_ctx, kv_type=kv_type, flash_attn=flash_attn, tool=tool)
        if fp is None:
            return ours
        from dataclasses import replace

        # llama.cpp's figures are allocations: the weights and the KV cache are resident in full; of the compute
        # buffer a GPU holds all (reserved_compute) while RAM holds what one batch touches (ours)
        return replace(ours, weights_bytes=max(ours.weights_bytes, fp.part_mib(0) * MIB),
                       kv_bytes=fp.part_mib(1) * MIB, reserved_compute=fp.part_mib(2) * MIB)

    return est
