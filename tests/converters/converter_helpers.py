"""Helpers shared by the converter tests (importable by name; fixtures live in conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speco3_converters.safetensors_io import read_header
from speco3_testkit.tinymodel import write_safetensors

try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1); a broken library raises
    HAVE_LLAMA = False

needs_llama = pytest.mark.skipif(not HAVE_LLAMA, reason="llama-cpp-python (with mtmd) is not installed")


def drop_tensors(folder: Path, names: set[str]) -> None:
    """Rewrite a sharded checkpoint without ``names`` (shards and index)."""
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    for shard in sorted(set(index["weight_map"].values())):
        path = folder / shard
        header, start = read_header(path)
        raw = path.read_bytes()
        keep = {}
        for name, info in header.items():
            if name == "__metadata__" or name in names:
                continue
            b, e = info["data_offsets"]
            keep[name] = (info["dtype"], tuple(info["shape"]), raw[start + b:start + e])
        write_safetensors(path, keep)
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if k not in names}
    index_path.write_text(json.dumps(index))
