"""A real vLLM (its CPU build) on loopback serving a tiny Hugging Face Qwen2.5-VL checkpoint, for the opt-in tests.

vLLM lives in its own virtual environment, built by ``scripts/setup-vllm.sh`` (default ``.venv-vllm`` at the
repository root; ``SPECO3_VLLM_VENV`` names another). `find_vllm_python` returns None when there is none; the
tests are opt-in (``SPECO3_VLLM=1``) because a start takes minutes on two cores.

`SERVE_FLAGS` are the flags the manual's vLLM command uses (docs/howto/servers.md; `readme_command` writes that
command; a default test checks the page carries it): the Spec-o3 chat template, room for a conversation's images, and the image-token
range of the local engine, so that vLLM's processor keeps our prepared images at their size.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from speco3.imaging import DEFAULT_MAX_TOKENS, FACTOR, MIN_PIXELS
from speco3_testkit.llamaserver import healthy

REPO = Path(__file__).resolve().parents[3]
#: The Spec-o3 chat template, as the manual's command names it (relative to the repository root).
CHAT_TEMPLATE = "converters/speco3_converters/speco3_chat.jinja"
#: The image-token range of the local engine (speco3.imaging), in pixels as transformers' Qwen2-VL processor takes
#: it (``size``; its ``min_pixels``/``max_pixels`` are deprecated): vLLM then resizes none of our images (each is
#: already smart_resized to at most DEFAULT_MAX_TOKENS tokens) and sizes its encoder cache for that cap.
MM_PROCESSOR_KWARGS = {"size": {"shortest_edge": MIN_PIXELS, "longest_edge": DEFAULT_MAX_TOKENS * FACTOR * FACTOR}}
#: Images per conversation (the full view and up to 7 zooms); no videos (vLLM then profiles no video at start).
LIMIT_MM = {"image": 8, "video": 0}
SERVE_FLAGS = ("--dtype", "float32", "--max-model-len", "4096", "--chat-template", CHAT_TEMPLATE,
               "--limit-mm-per-prompt", json.dumps(LIMIT_MM, separators=(",", ":")),
               "--mm-processor-kwargs", json.dumps(MM_PROCESSOR_KWARGS, separators=(",", ":")))
#: The environment the server is started with: its KV cache in GiB (vLLM's CPU build).
SERVE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


#: A checkpoint's own template of the kind vLLM fails on when ``--chat-template`` is forgotten: it walks the content
#: parts ("openai" content format) and writes image placeholders in user turns only, so the zoom image of a tool turn
#: has none and vLLM answers HTTP 500 "Failed to apply prompt replacement for mm_items['image'][1]". (The test
#: kit's stock ChatML ``{{ m.content }}`` template does not: vLLM 0.32 then flattens every message's content itself
#: with a placeholder per image, and the prompt only differs from ours, which `server check` lists byte by byte.)
USER_TURN_IMAGES_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ 'user' if m.role == 'tool' else m.role }}\n"
    "{% if m.content is string %}{{ m.content }}{% else %}{% for c in m.content %}"
    "{% if c.type == 'text' %}{{ c.text }}{% elif m.role == 'user' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def set_chat_template(checkpoint: Path, template: str) -> Path:
    """Replace the checkpoint's own chat template (``tokenizer_config.json``); return the checkpoint."""
    path = checkpoint / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["chat_template"] = template
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return checkpoint


def find_vllm_python() -> Path | None:
    """The Python of the vLLM environment (``$SPECO3_VLLM_VENV`` or ``.venv-vllm``), None when it is not built."""
    venv = Path(os.environ.get("SPECO3_VLLM_VENV") or REPO / ".venv-vllm")
    python = venv / "bin" / "python"
    return python if python.is_file() and any(venv.glob("lib/python*/site-packages/vllm/__init__.py")) else None


def shell_quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in "{}\" ") else arg


def readme_command(model: str = "MODEL_DIR", port: int = 8000) -> str:
    """The manual's vLLM command (docs/howto/servers.md; one line, which the page may wrap with backslashes)."""
    env = " ".join(f"{k}={v}" for k, v in SERVE_ENV.items())
    flags = " ".join(shell_quote(a) for a in SERVE_FLAGS)
    return f"{env} python -m vllm.entrypoints.openai.api_server --model {model} {flags} --port {port}"


def serve_command(python: Path, model: Path, port: int, *, chat_template: bool = True,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """The command `vllm_server` runs: the manual's, on 127.0.0.1 (without ``--chat-template`` when asked, which
    leaves vLLM on the checkpoint's own template: the forgotten-flag case), then ``extra``."""
    flags = list(SERVE_FLAGS)
    if not chat_template:
        i = flags.index("--chat-template")
        del flags[i:i + 2]
    else:
        flags[flags.index("--chat-template") + 1] = str(REPO / CHAT_TEMPLATE)
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), *flags,
            "--host", "127.0.0.1", "--port", str(port), *extra]


@contextlib.contextmanager
def vllm_server(python: Path, model: Path, *, log: Path, chat_template: bool = True, extra: tuple[str, ...] = (),
                start_timeout: float = 480.0) -> Iterator[str]:
    """Run vLLM on 127.0.0.1 and a free port; yield its base URL once ``/health`` answers; stop it (and its engine
    processes: it runs in its own process group) after. A server that exits or is not up in ``start_timeout``
    seconds raises with the end of its log."""
    from speco3_testkit.llamaserver import free_port

    port = free_port()
    env = {**os.environ, **SERVE_ENV, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    env.pop("PYTHONPATH", None)  # the server runs on its own environment's packages only
    out = open(log, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(serve_command(python, model, port, chat_template=chat_template, extra=extra), stdout=out,
                            stderr=subprocess.STDOUT, env=env, cwd=str(model.parent), start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while not healthy(port):
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode}; log: {_tail(log)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM was not up in {start_timeout:.0f} s; log: {_tail(log)}")
            time.sleep(1.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)
        out.close()


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 30 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with contextlib.suppress(ProcessLookupError):  # engine processes left behind by a server that exited
        os.killpg(proc.pid, signal.SIGKILL)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


