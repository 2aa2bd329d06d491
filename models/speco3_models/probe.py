"""Load a text model + projector pair in a separate process to prove llama.cpp accepts it.

llama.cpp aborts the whole process (``GGML_ASSERT``, ``abort()``) on some malformed files that pass every header
check: a tensor of the wrong shape, a missing tensor, an inconsistent window-attention pattern. `probe_load` runs
the load (llama model, then the mtmd vision context, as the engine does) in a child Python process, so such a
file costs a failed probe, not the application. Run as ``python -m speco3_models.probe TEXT MMPROJ``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_MARK = "SPECO3_PROBE "


@dataclass
class ProbeResult:
    """Outcome of `probe_load`: ``ok`` or the error text (with the tail of llama.cpp's log)."""

    ok: bool
    error: str | None = None
    seconds: float = 0.0
    returncode: int | None = None
    info: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""


def probe_load(text: str | os.PathLike[str], mmproj: str | os.PathLike[str], timeout: float = 300.0, *,
               warmup: bool = True, n_threads: int | None = None) -> ProbeResult:
    """Load both files with llama-cpp-python in a subprocess and report whether it worked.

    Parameters
    ----------
    text, mmproj : path-like
        Text model and projector GGUF files.
    timeout : float
        Seconds before the child is killed (a 7B model maps in seconds; warm-up of the vision graph takes longer).
    warmup : bool
        Let mtmd build its vision compute graph (catches graph-level shape errors; costs memory and time).
    n_threads : int, optional
        Threads for the child (default: what llama.cpp chooses).

    Returns
    -------
    ProbeResult
        ``ok`` with ``info`` (``n_embd``, ``n_params``, ``desc``, ``vision``) or ``error``: the child's own message,
        the signal that killed it, or a timeout.
    """
    cmd = [sys.executable, "-m", "speco3_models.probe", str(Path(text).resolve()), str(Path(mmproj).resolve()),
           "--warmup" if warmup else "--no-warmup"]
    if n_threads:
        cmd += ["--threads", str(n_threads)]
    env = dict(os.environ, GGML_NO_BACKTRACE="1")  # no gdb backtrace on abort: fast, short log
    env.pop("PYTHONFAULTHANDLER", None)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        tail = _tail((exc.stderr or b"").decode("utf-8", "replace") if isinstance(exc.stderr, bytes) else exc.stderr)
        return ProbeResult(False, f"loading did not finish within {timeout:.0f} s", time.monotonic() - start, None,
                           log_tail=tail)
    seconds = time.monotonic() - start
    tail = _tail(proc.stderr)
    report = None
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            report = json.loads(line[len(_MARK):])
    if report is not None and report.get("ok") and proc.returncode == 0:
        return ProbeResult(True, None, seconds, 0, report.get("info", {}), tail)
    if report is not None and report.get("error"):
        error = report["error"]
    elif proc.returncode < 0:
        try:
            sig = signal.Signals(-proc.returncode).name
        except ValueError:
            sig = f"signal {-proc.returncode}"
        error = f"llama.cpp crashed while loading ({sig})"
    else:
        error = f"the loader exited with status {proc.returncode}"
    last = _last_error_line(proc.stderr)
    if last and last not in error:
        error = f"{error}: {last}"
    logger.info("probe of %s + %s failed: %s", text, mmproj, error)
    return ProbeResult(False, error, seconds, proc.returncode, report.get("info", {}) if report else {}, tail)


def _tail(text: str | None, n: int = 30) -> str:
    return "\n".join((text or "").splitlines()[-n:])


def _last_error_line(stderr: str | None) -> str | None:
    lines = (stderr or "").splitlines()
    for key in ("ggml_assert", "assert", "error", "exception", "abort", "failed", "invalid"):  # most specific first
        for line in reversed(lines):
            if key in line.lower():
                return line.strip()[:400]
    return None


def _child(argv: list[str]) -> int:  # pragma: no cover - runs in the subprocess
    import argparse

    ap = argparse.ArgumentParser(prog="python -m speco3_models.probe")
    ap.add_argument("text")
    ap.add_argument("mmproj")
    ap.add_argument("--warmup", dest="warmup", action="store_true", default=True)
    ap.add_argument("--no-warmup", dest="warmup", action="store_false")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)

    def emit(**kw) -> None:
        print(_MARK + json.dumps(kw), flush=True)

    try:
        import llama_cpp
        from llama_cpp import mtmd_cpp
    except ImportError as exc:
        emit(ok=False, error=f"llama-cpp-python is not installed ({exc})")
        return 3
    llama_cpp.llama_backend_init()
    mp = llama_cpp.llama_model_default_params()
    mp.n_gpu_layers = 0
    mp.use_mmap = True
    model = llama_cpp.llama_model_load_from_file(args.text.encode(), mp)
    if not model:
        emit(ok=False, error="llama.cpp could not load the text model")
        return 2
    buf = (llama_cpp.ctypes.c_char * 256)()
    llama_cpp.llama_model_desc(model, buf, 256)
    info = {"n_embd": llama_cpp.llama_model_n_embd(model), "n_params": llama_cpp.llama_model_n_params(model),
            "desc": buf.value.decode("utf-8", "replace")}
    cp = mtmd_cpp.mtmd_context_params_default()
    cp.use_gpu = False
    cp.print_timings = False
    cp.warmup = args.warmup
    if args.threads:
        cp.n_threads = args.threads
    ctx = mtmd_cpp.mtmd_init_from_file(args.mmproj.encode(), model, cp)
    if not ctx:
        llama_cpp.llama_model_free(model)
        emit(ok=False, error="llama.cpp could not load the vision projector", info=info)
        return 2
    info["vision"] = bool(mtmd_cpp.mtmd_support_vision(ctx))
    mtmd_cpp.mtmd_free(ctx)
    llama_cpp.llama_model_free(model)
    if not info["vision"]:
        emit(ok=False, error="the projector loaded but offers no vision input", info=info)
        return 2
    emit(ok=True, info=info)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_child(sys.argv[1:]))
