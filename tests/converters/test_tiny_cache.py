"""The test kit's cache of converted tiny pairs: reused unchanged, rebuilt when damaged, old digests pruned."""

from __future__ import annotations

from speco3_models.gguf_check import check_pair
from speco3_testkit.tinymodel import tiny_gguf_pair


def test_cached_pair_is_reused_rebuilt_when_damaged_and_old_builds_are_pruned(tmp_path):
    text, mmproj = tiny_gguf_pair(tmp_path, "F32")  # F32: converter only, no llama.cpp quantization
    mtime = text.stat().st_mtime_ns
    assert tiny_gguf_pair(tmp_path, "F32") == (text, mmproj) and text.stat().st_mtime_ns == mtime
    stale = tmp_path / "tiny-qwen25vl-F32-0123456789abcdef"  # a pair made by an older converter or builder
    stale.mkdir()
    with open(text, "r+b") as fh:
        fh.truncate(text.stat().st_size // 2)
    assert tiny_gguf_pair(tmp_path, "F32") == (text, mmproj)
    check_pair(text, mmproj)  # rebuilt whole, not handed out truncated
    assert not stale.exists()
