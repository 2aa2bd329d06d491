"""GGUF checks: good files pass; truncated, zero-filled, garbage and wrong files fail fast with specific reasons."""

from __future__ import annotations

import os
import random
import struct
import threading
import time

import pytest
from ggufs import write_mmproj_gguf, write_text_gguf

from speco3.errors import ModelFileError
from speco3_models.gguf_check import (
    LargeArray,
    check_pair,
    check_projector,
    check_text_model,
    read_gguf_summary,
)
from speco3_models.gguf_scan import scan_gguf


def _fails(path, match, check=read_gguf_summary):
    start = time.monotonic()
    with pytest.raises(ModelFileError) as info:
        check(path)
    assert time.monotonic() - start < 2.0, "a corrupt file must be rejected quickly"
    assert info.value.path == str(path)
    assert match in info.value.reason, info.value.reason
    return info.value.reason


def test_summary_of_a_good_text_model(gguf_pair):
    text, _ = gguf_pair
    s = read_gguf_summary(text)
    assert s.arch == "qwen2vl" and s.kind == "model" and s.name == "tiny test model"
    assert s.n_tensors == 2 + 2 * 12 and s.tensor_types == {"F32": 26}
    assert s.file_size == text.stat().st_size and s.version == 3
    assert s.quant == "F32"
    assert isinstance(s.get("tokenizer.ggml.tokens"), LargeArray) and len(s.get("tokenizer.ggml.tokens")) == 80
    assert s.get("qwen2vl.rope.dimension_sections") == [2, 3, 3, 0]
    assert s.tensors["token_embd.weight"].shape == (64, 80)
    assert check_text_model(text).arch == "qwen2vl"


def test_good_projector_and_pair(gguf_pair):
    text, proj = gguf_pair
    p = check_projector(proj)
    assert p.arch == "clip" and p.get("clip.projector_type") == "qwen2.5vl_merger"
    pair = check_pair(text, proj)
    assert pair.width == 64 and pair.text.path == text


def _offsets(path):
    scan = scan_gguf(path)
    size = scan.file_size
    return sorted({0, 3, 7, 16, 23, 24, 60, 500, scan.data_offset - 3, scan.data_offset,
                   scan.data_offset + 100, size // 2, size - 1})


def test_truncated_at_many_offsets(gguf_pair, tmp_path):
    text, _ = gguf_pair
    data = text.read_bytes()
    reasons = set()
    for cut in _offsets(text):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(data[:cut])
        reason = _fails(bad, "")
        assert any(w in reason for w in ("truncated", "too small")), (cut, reason)
        reasons.add(reason)
    assert len(reasons) >= 5, "each cut should name where the file ends"


def test_zero_filled_and_random_files(gguf_pair, tmp_path):
    text, _ = gguf_pair
    zero = tmp_path / "zero.gguf"
    zero.write_bytes(bytes(text.stat().st_size))
    assert "all zero bytes" in _fails(zero, "not a GGUF file")
    noise = tmp_path / "noise.gguf"
    noise.write_bytes(random.Random(1).randbytes(100_000))
    _fails(noise, "not a GGUF file")
    # valid magic and version followed by garbage: the counts cannot fit in the file
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + struct.pack("<I", 3) + random.Random(2).randbytes(5000))
    _fails(garbage, "corrupt GGUF")


def test_absurd_lengths_are_refused_without_allocating(tmp_path):
    huge = tmp_path / "huge.gguf"
    huge.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**62) + b"x" * 64)
    _fails(huge, "claims")
    many = tmp_path / "many.gguf"
    many.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**40, 0) + bytes(64))
    _fails(many, "header claims 1099511627776 tensors")
    arr = tmp_path / "arr.gguf"
    key = b"a.b"
    arr.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
                    + struct.pack("<IIQ", 9, 8, 2**50) + bytes(64))
    _fails(arr, "array items")


def test_version_and_byte_order(gguf_pair, tmp_path):
    text, _ = gguf_pair
    data = bytearray(text.read_bytes())
    v9 = tmp_path / "v9.gguf"
    v9.write_bytes(bytes(data[:4] + struct.pack("<I", 9) + data[8:]))
    _fails(v9, "unsupported GGUF version 9")
    be = tmp_path / "be.gguf"
    be.write_bytes(bytes(data[:4] + struct.pack(">I", 3) + data[8:]))
    _fails(be, "big-endian")


def test_tensor_data_outside_the_file(tmp_path):
    path = write_text_gguf(tmp_path / "t.gguf")
    scan = scan_gguf(path)
    last = max(scan.tensors, key=lambda t: t.offset)
    with open(path, "r+b") as fh:
        fh.truncate(last.offset + last.nbytes - 4)
    reason = _fails(path, "truncated GGUF")
    assert last.name in reason


def test_random_byte_flips_never_crash(gguf_pair, tmp_path):
    text, _ = gguf_pair
    data = text.read_bytes()
    scan = scan_gguf(text)
    rng = random.Random(7)
    bad = tmp_path / "flip.gguf"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(150):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(0, scan.data_offset)  # the header, metadata and tensor table
            mutated[pos] = rng.randrange(256)
        bad.write_bytes(bytes(mutated))
        try:
            check_text_model(bad)
            outcomes["ok"] += 1
        except ModelFileError as exc:
            assert exc.reason
            outcomes["error"] += 1
    assert outcomes["error"] > 50


def test_wrong_architectures(gguf_pair, tmp_path):
    text, proj = gguf_pair
    _fails(proj, "this is a vision projector, not the text model", check_text_model)
    _fails(text, "this is a text model, not the vision projector", check_projector)
    llama = write_text_gguf(tmp_path / "llama.gguf", arch="llama")
    _fails(llama, "architecture is 'llama', expected 'qwen2vl'", check_text_model)
    q2 = write_mmproj_gguf(tmp_path / "q2.gguf", projector_type="qwen2vl_merger")
    _fails(q2, "Qwen2-VL projector", check_projector)
    novis = write_mmproj_gguf(tmp_path / "novis.gguf", has_vision=False)
    _fails(novis, "no vision encoder", check_projector)


def test_incomplete_files(tmp_path):
    t = write_text_gguf(tmp_path / "t.gguf", drop_tensors=("blk.1.ffn_up.weight",))
    _fails(t, "missing blk.1.ffn_up.weight", check_text_model)
    k = write_text_gguf(tmp_path / "k.gguf", drop_keys=("qwen2vl.rope.dimension_sections",))
    _fails(k, "missing qwen2vl.rope.dimension_sections", check_text_model)
    p = write_mmproj_gguf(tmp_path / "p.gguf", drop_tensors=("mm.2.weight", "v.patch_embd.weight.1"))
    reason = _fails(p, "incomplete projector", check_projector)
    assert "mm.2.weight" in reason and "v.patch_embd.weight.1" in reason
    wa = write_mmproj_gguf(tmp_path / "wa.gguf", n_wa_pattern=1)
    _fails(wa, "n_wa_pattern is 1", check_projector)


def test_mismatched_pair_width(tmp_path):
    text = write_text_gguf(tmp_path / "t.gguf", n_embd=64)
    proj = write_mmproj_gguf(tmp_path / "p.gguf", proj_dim=128)
    reason = _fails(proj, "projector output width is 128", lambda _: check_pair(text, proj))
    assert "hidden size 64" in reason
    # without clip.vision.projection_dim the width comes from the mm.2 tensor
    proj2 = write_mmproj_gguf(tmp_path / "p2.gguf", proj_dim=96, write_proj_dim=False)
    _fails(proj2, "projector output width is 96", lambda _: check_pair(text, proj2))


def test_missing_and_unreadable_paths(tmp_path):
    _fails(tmp_path / "nope.gguf", "cannot read the file")
    folder = tmp_path / "dir.gguf"
    folder.mkdir()
    _fails(folder, "not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_refused_without_opening_it(tmp_path):
    """A FIFO named like a model is refused before any read (opening it for reading would block without a writer)."""
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    done = threading.Event()
    reasons: list[str] = []

    def check():
        try:
            read_gguf_summary(fifo)
        except ModelFileError as exc:
            reasons.append(exc.reason)
        finally:
            done.set()

    threading.Thread(target=check, daemon=True).start()
    if not done.wait(5.0):  # blocked in open(): let it see end-of-file, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        done.wait(5.0)
        pytest.fail("the check opened the FIFO for reading (it blocked until a writer came)")
    assert reasons == ["not a regular file"]


def test_scan_decoder_agrees_with_ggufs_reader_on_converter_output(tmp_path):
    """Two independent parsers: the bounded scan's values equal gguf's reader's on real converter files."""
    from speco3_converters.convert import convert_checkpoint
    from speco3_testkit import tinymodel as testing

    hf = testing.make_tiny_qwen25vl(tmp_path / "hf", tied=True)
    res = convert_checkpoint(hf, tmp_path / "out", outtype="bf16", name="tiny")
    for path in (res.text_path, res.mmproj_path):
        fast, deep = read_gguf_summary(path), read_gguf_summary(path, use_reader=True)
        assert fast.metadata.keys() == deep.metadata.keys() and fast.tensors == deep.tensors
        if path == res.text_path:
            assert isinstance(fast.get("tokenizer.ggml.tokens"), LargeArray)
        assert fast.get("tokenizer.chat_template") == deep.get("tokenizer.chat_template")
    pair = check_pair(res.text_path, res.mmproj_path)
    assert pair.width == 256 and pair.text.quant == "BF16" and "output.weight" not in pair.text.tensors


def test_byte_flips_with_both_parsers(gguf_pair, tmp_path):
    _, proj = gguf_pair
    data = proj.read_bytes()
    end = scan_gguf(proj).data_offset
    rng = random.Random(11)
    bad = tmp_path / "flip.gguf"
    for _ in range(60):
        mutated = bytearray(data)
        pos = rng.randrange(0, end)
        mutated[pos] = rng.randrange(256)
        bad.write_bytes(bytes(mutated))
        try:
            read_gguf_summary(bad, use_reader=True)
        except ModelFileError as exc:
            assert exc.reason
