"""Converted and quantized tiny models load in llama-cpp-python with the projector (mtmd) and run."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from converter_helpers import needs_llama

from speco3.errors import ConversionError, ModelFileError
from speco3_converters import convert_checkpoint
from speco3_converters.quantize import quantize
from speco3_converters.verify import verify_gguf
from speco3_models.gguf_check import read_gguf_summary
from speco3_testkit.smoke import smoke_test

pytestmark = [pytest.mark.llama, needs_llama]


@pytest.mark.parametrize(("options", "qtype"), [
    ({}, "Q8_0"),
    ({}, "Q4_K_M"),
    ({"layout": "new"}, "Q8_0"),
    ({"tied": True}, "Q4_K_M"),
    ({"nested_config": True}, "Q8_0"),
], ids=["classic-Q8_0", "classic-Q4_K_M", "new-layout-Q8_0", "tied-Q4_K_M", "nested-config-Q8_0"])
def test_convert_quantize_load_and_generate(tiny_ckpts, test_image, tmp_path, options, qtype):
    res = convert_checkpoint(tiny_ckpts(**options), tmp_path, name="tiny")
    steps = []
    out = quantize(res.text_path, tmp_path / f"tiny-{qtype}.gguf", qtype, progress=lambda *a: steps.append(a))
    info = verify_gguf(out, "text")
    n = info["n_tensors"]
    assert steps and steps[-1] == ("quantize", n, n)
    if qtype == "Q8_0":
        assert set(info["types"]) == {"Q8_0", "F32"}
    else:  # every text row length (256, 768) is a multiple of 256: no fallback; output / some v, down Q6_K
        assert set(info["types"]) == {"Q4_K", "Q6_K", "F32"}
        assert info["types"]["F32"] == 11  # norms and q/k/v biases stay F32
    r = smoke_test(out, res.mmproj_path, test_image, n_predict=4)
    assert r["finite"] and len(r["tokens"]) == 4 and all(0 <= t < r["n_vocab"] for t in r["tokens"])
    kinds = [c["type"] for c in r["layout"]]
    assert kinds == ["text", "image", "text"]
    image = r["layout"][1]
    assert (image["nx"], image["ny"], image["n_tokens"], image["n_pos"]) == (8, 6, 48, 8)
    assert np.std(r["logits"]) > 0.1  # not a degenerate forward


def test_pairs_agree_across_quantizations(test_image, tiny_gguf):
    """F16 and Q8_0 of the same weights predict nearly the same distribution; Q4_K_M stays close."""
    logits = {}
    for q in ("F16", "Q8_0", "Q4_K_M"):
        text, mmproj = tiny_gguf(q)
        logits[q] = smoke_test(text, mmproj, test_image, n_predict=1)["logits"]

    def cos(a, b):
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    assert cos(logits["F16"], logits["Q8_0"]) > 0.999
    assert cos(logits["F16"], logits["Q4_K_M"]) > 0.95
    # cached: a second call returns the same files without rebuilding them
    text, _ = tiny_gguf("Q8_0")
    mtime = os.stat(text).st_mtime_ns
    assert tiny_gguf("Q8_0")[0] == text and os.stat(text).st_mtime_ns == mtime


def test_bounded_quantizer_buffer_writes_the_same_file(tiny_ckpts, tmp_path):
    """Slabs of 64 KiB (every tensor of the tiny model above a few rows split into many) give the bytes of
    llama.cpp's one-slab default, for K-quants and Q8_0; the slab bound is what keeps a 7B's quantization small."""
    res = convert_checkpoint(tiny_ckpts(), tmp_path, name="tiny")
    for qtype in ("Q4_K_M", "Q8_0"):
        whole = quantize(res.text_path, tmp_path / f"whole-{qtype}.gguf", qtype, max_buf_bytes=0)
        slabs = quantize(res.text_path, tmp_path / f"slabs-{qtype}.gguf", qtype, max_buf_bytes=64 << 10)
        assert whole.read_bytes() == slabs.read_bytes()
    biggest = max(t.nbytes for t in read_gguf_summary(res.text_path, use_reader=True).tensors.values())
    assert biggest > 4 * (64 << 10), "the test must split tensors into several slabs"


def test_projector_quantized_by_llama_cpp(tiny_ckpts, test_image, tmp_path):
    res = convert_checkpoint(tiny_ckpts(), tmp_path, outtype="f16", name="tiny")
    mm = quantize(res.mmproj_path, tmp_path / "mmproj-Q8_0.gguf", "Q8_0")
    info = verify_gguf(mm, "mmproj")
    assert info["types"]["Q8_0"] > 0 and info["types"]["F16"] >= 2  # patch kernels and odd-width ffn_down stay F16
    q8 = smoke_test(res.text_path, mm, test_image, n_predict=1)
    f16 = smoke_test(res.text_path, res.mmproj_path, test_image, n_predict=1)["logits"]
    assert q8["finite"]
    cos = float(q8["logits"] @ f16 / np.linalg.norm(q8["logits"]) / np.linalg.norm(f16))
    assert cos > 0.999, cos  # the README's figure for a Q8_0 projector (the low-memory build)
    with pytest.raises(ConversionError, match="should stay F16 or Q8_0"):
        quantize(res.mmproj_path, tmp_path / "mm-q4.gguf", "Q4_K_M")


def test_bad_files_are_refused_before_llama_cpp(tiny_ckpts, tmp_path):
    res = convert_checkpoint(tiny_ckpts(), tmp_path, outtype="f16", name="tiny")
    raw = res.text_path.read_bytes()
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ModelFileError, match="truncated"):
        quantize(truncated, tmp_path / "out.gguf", "Q8_0")
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + os.urandom(4096))
    with pytest.raises(ModelFileError):
        quantize(garbage, tmp_path / "out.gguf", "Q8_0")
    q8 = quantize(res.text_path, tmp_path / "q8.gguf", "Q8_0")
    with pytest.raises(ConversionError, match="already quantized"):
        quantize(q8, tmp_path / "again.gguf", "Q4_K_M")
    with pytest.raises(ConversionError, match="unknown quantization"):
        quantize(res.text_path, tmp_path / "x.gguf", "Q3_K_XL")
    assert not list(tmp_path.glob("*.part"))


def test_llama_failure_is_reported_not_a_crash(tiny_ckpts, test_image, tmp_path):
    """A projector that passes nothing to llama.cpp's expectations fails in the child, not in pytest."""
    from speco3.errors import EngineError

    res = convert_checkpoint(tiny_ckpts(), tmp_path, outtype="f16", name="tiny")
    with pytest.raises(EngineError, match="llama.cpp failed"):
        smoke_test(res.text_path, res.text_path, test_image)  # a text model given as projector


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_a_hung_quantizer_is_killed_at_the_timeout(tiny_gguf, tmp_path):
    """The output is a named pipe nobody reads: llama.cpp's child blocks opening it, silent and alive (a real hang,
    its stderr open); the timeout kills it and cleans up."""
    text, _ = tiny_gguf("F32")
    part = tmp_path / "out.gguf.part"
    os.mkfifo(part)
    t0 = time.monotonic()
    with pytest.raises(ConversionError, match="did not finish within 3 s"):
        quantize(text, tmp_path / "out.gguf", "Q8_0", timeout=3)
    assert time.monotonic() - t0 < 60
    assert not part.exists() and not (tmp_path / "out.gguf").exists()
