"""Conversion of tiny Qwen2.5-VL checkpoints: plan, metadata, exact tensor data, layouts, streaming."""

from __future__ import annotations

import json
import shutil

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from speco3.errors import ConversionError
from speco3_converters import convert_checkpoint
from speco3_converters.chat_template import IMAGE_PLACEHOLDER, render, speco3_chat_template
from speco3_converters.gguf_stream import write_file
from speco3_converters.qwen25vl import build_plan
from speco3_converters.safetensors_io import SafetensorsCheckpoint, bf16_to_f32

N_TEXT = 3 + 2 * 12  # embd, output_norm, output + 12 per layer
N_MMPROJ = 2 + 4 * 16 + 1 + 4  # 2 patch kernels, 16 per block, post_ln, merger


def _tensors(path) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in gguf.GGUFReader(path).tensors}


def _field(path, key):
    return gguf.GGUFReader(path).get_field(key).contents()


@pytest.fixture(scope="module")
def converted(tiny_ckpts, tmp_path_factory):
    """The default tiny checkpoint converted to BF16 text + F16 projector."""
    hf = tiny_ckpts()
    return hf, convert_checkpoint(hf, tmp_path_factory.mktemp("bf16"), outtype="bf16", name="tiny")


def test_dry_run_plans_every_tensor_and_key_without_writing(tiny_ckpts, tmp_path):
    calls = []
    res = convert_checkpoint(tiny_ckpts(), tmp_path / "out", dry_run=True, progress=lambda *a: calls.append(a))
    assert res.text_path is None and res.mmproj_path is None and not (tmp_path / "out").exists()
    text, mmproj = res.plan.text, res.plan.mmproj
    assert (len(text.tensors), len(mmproj.tensors)) == (N_TEXT, N_MMPROJ)
    assert text.arch == "qwen2vl" and mmproj.arch == "clip"
    assert text.value("qwen2vl.rope.dimension_sections") == [8, 12, 12, 0]
    assert text.value("tokenizer.ggml.pre") == "qwen2" and text.value("tokenizer.ggml.model") == "gpt2"
    assert mmproj.value("clip.projector_type") == "qwen2.5vl_merger"
    assert mmproj.value("clip.vision.n_wa_pattern") == 2
    assert mmproj.value("clip.vision.projection_dim") == 256
    assert np.allclose(mmproj.value("clip.vision.image_std"), [0.26862954, 0.26130258, 0.27577711])
    by_name = {t.name: t for t in text.tensors + mmproj.tensors}
    assert by_name["blk.0.attn_norm.weight"].qtype == QT.F32 and by_name["blk.0.attn_q.bias"].qtype == QT.F32
    assert by_name["blk.1.ffn_down.weight"].qtype == QT.BF16
    assert by_name["v.blk.0.attn_k.weight"].rows == (128, 256) and by_name["v.blk.0.attn_k.bias"].shape == (128,)
    assert by_name["v.patch_embd.weight.1"].temporal == 1 and by_name["v.patch_embd.weight"].qtype == QT.F16
    desc = res.plan.describe()
    assert desc["files"][0]["n_tensors"] == N_TEXT and desc["tensor_layout"] == "classic"
    json.dumps(desc)  # printable as JSON
    assert calls == [("plan", N_TEXT + N_MMPROJ, N_TEXT + N_MMPROJ)]


def test_bf16_text_is_a_bit_exact_copy_and_splits_are_right(converted):
    hf, res = converted
    ckpt = SafetensorsCheckpoint(hf)
    text, mmproj = _tensors(res.text_path), _tensors(res.mmproj_path)
    assert len(text) == N_TEXT and len(mmproj) == N_MMPROJ
    for name, src in (("token_embd.weight", "model.embed_tokens.weight"), ("output.weight", "lm_head.weight"),
                      ("blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight")):
        assert text[name].tensor_type == QT.BF16
        assert np.array_equal(text[name].data.view(np.uint16).reshape(-1), ckpt[src].read().reshape(-1))
    # norms and biases become F32 with the exact bf16 values
    q_bias = bf16_to_f32(ckpt["model.layers.0.self_attn.q_proj.bias"].read())
    assert text["blk.0.attn_q.bias"].tensor_type == QT.F32
    assert np.array_equal(text["blk.0.attn_q.bias"].data, q_bias)
    # fused QKV split in thirds; projector matrices F16 of the bf16 values
    qkv = bf16_to_f32(ckpt["visual.blocks.2.attn.qkv.weight"].read())
    for j, part in enumerate("qkv"):
        t = mmproj[f"v.blk.2.attn_{part}.weight"]
        assert t.tensor_type == QT.F16
        assert np.array_equal(t.data, qkv[j * 128:(j + 1) * 128].astype(np.float16))  # one rounding only
    assert np.array_equal(mmproj["v.blk.2.attn_v.bias"].data,
                          bf16_to_f32(ckpt["visual.blocks.2.attn.qkv.bias"].read())[256:])
    conv = bf16_to_f32(ckpt["visual.patch_embed.proj.weight"].read())
    for t_idx, name in ((0, "v.patch_embd.weight"), (1, "v.patch_embd.weight.1")):
        assert [int(d) for d in mmproj[name].shape] == [14, 14, 3, 128]  # ggml order
        assert np.array_equal(mmproj[name].data, conv[:, :, t_idx].astype(np.float16))
    assert mmproj["v.post_ln.weight"].tensor_type == QT.F32


def test_tokenizer_metadata(converted):
    _, res = converted
    reader = gguf.GGUFReader(res.text_path)
    tokens = reader.get_field("tokenizer.ggml.tokens").contents()
    types = reader.get_field("tokenizer.ggml.token_type").contents()
    assert len(tokens) == 1024 and len(types) == 1024
    ids = {t: i for i, t in enumerate(tokens)}
    assert types[ids["<|im_start|>"]] == gguf.TokenType.CONTROL
    assert types[ids["<|image_pad|>"]] == gguf.TokenType.CONTROL
    assert types[ids["<tool_call>"]] == gguf.TokenType.USER_DEFINED
    assert types[ids["<|fim_prefix|>"]] == gguf.TokenType.CONTROL  # not flagged special, but <|...|>
    assert tokens[-1] == "[PAD1023]" and types[-1] == gguf.TokenType.UNUSED
    assert types[ids["Ġthe"]] == gguf.TokenType.NORMAL
    assert reader.get_field("tokenizer.ggml.eos_token_id").contents() == ids["<|im_end|>"]
    assert reader.get_field("tokenizer.ggml.padding_token_id").contents() == ids["<|endoftext|>"]
    assert reader.get_field("tokenizer.ggml.add_bos_token").contents() is False
    assert len(reader.get_field("tokenizer.ggml.merges").contents()) > 300


def test_embedded_chat_template_reproduces_the_protocol_fixtures(converted, protocol_dir):
    """The template read back from the GGUF renders the byte-exact Spec-o3 training strings."""
    _, res = converted
    template = _field(res.text_path, "tokenizer.chat_template")
    assert template == speco3_chat_template() and "<tool_response>" in template
    protocol = protocol_dir
    schema = {"type": "function", "function": {
        "name": "spectral_visualization_tool",
        "description": "A tool for visualizing spectral data with wavelength range zooming capabilities.",
        "parameters": {"type": "object", "properties": {
            "wavelength_range": {"type": "array", "description":
                                 "Wavelength range to focus on [min_wavelength, max_wavelength] in Angstroms"},
            "label": {"type": "string", "description": "Optional label for the spectral feature being analyzed"}},
            "required": ["wavelength_range"]}}}
    first = [{"role": "system", "content": "You are a helpful assistant."},
             {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "\nTASK TEXT"}]}]
    out = render(first, [schema], template=template)
    assert out == (protocol / "first_turn.txt").read_text(encoding="utf-8")
    call = {"role": "assistant", "content": "<think>Check Hα.</think>", "tool_calls": [{"type": "function",
            "function": {"name": "spectral_visualization_tool",
                         "arguments": {"label": "Zoom on Hα region", "wavelength_range": [6500, 6600]}}}]}
    before = render(first + [call], [schema], add_generation_prompt=False, template=template)
    assert before.endswith('"wavelength_range": [6500, 6600]}}\n</tool_call><|im_end|>\n')
    ok = {"role": "tool", "content": [{"type": "image"}, {"type": "text", "text":
          "Generated spectral visualization focused on wavelength range (6500, 6600) Å for Zoom on Hα region."}]}
    assert render(first + [call, ok], [schema], template=template)[len(before):] == \
        (protocol / "tool_turn_image.txt").read_text(encoding="utf-8")
    bad = {"role": "tool", "content": "Error: The specified wavelength range [10000, 12000] is invalid or "
                                      "outside the available data range [3700.0, 9100.0]."}
    assert render(first + [call, bad], [schema], template=template)[len(before):] == \
        (protocol / "tool_turn_error.txt").read_text(encoding="utf-8")
    assert render(first, None, template=template).count(IMAGE_PLACEHOLDER) == 1


@pytest.mark.parametrize("options", [
    {"layout": "new"}, {"nested_config": True}, {"dtype": "f32"}, {"dtype": "f16"}, {"shards": 1},
], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_variants_give_the_same_files(tiny_ckpts, converted, options, tmp_path):
    """Naming layout, config layout, shard count and storage type do not change the converted model."""
    _, ref = converted
    outtype = "f32"  # f32 output: every input type converts exactly
    a = convert_checkpoint(tiny_ckpts(), tmp_path / "a", outtype=outtype, mmproj_type="f32", name="tiny")
    b = convert_checkpoint(tiny_ckpts(**options), tmp_path / "b", outtype=outtype, mmproj_type="f32", name="tiny")
    for pa, pb in ((a.text_path, b.text_path), (a.mmproj_path, b.mmproj_path)):
        ta, tb = _tensors(pa), _tensors(pb)
        assert list(ta) == list(tb)
        for name in ta:
            if options.get("dtype") == "f32":  # unrounded weights: rounding them to bf16 gives the reference
                as_bf16 = gguf.quants.quantize(np.asarray(tb[name].data), QT.BF16).view(np.uint16)
                assert np.array_equal(ta[name].data, bf16_to_f32(as_bf16).reshape(ta[name].data.shape)), name
            elif options.get("dtype") == "f16":  # f16 storage rounds the random weights differently
                assert np.allclose(ta[name].data, tb[name].data, rtol=1e-2, atol=1e-4), name
            else:
                assert np.array_equal(ta[name].data, tb[name].data), name
    assert b.plan.layout == options.get("layout", "classic")
    assert b.plan.config_layout == ("nested" if options.get("nested_config") else "flat")


def test_tied_embeddings_have_no_output_tensor(tiny_ckpts, tmp_path):
    res = convert_checkpoint(tiny_ckpts(tied=True), tmp_path, outtype="f16", name="tiny3b")
    names = set(_tensors(res.text_path))
    assert "output.weight" not in names and "token_embd.weight" in names and len(names) == N_TEXT - 1
    assert res.text_path.name == "tiny3b-F16.gguf"
    assert _field(res.text_path, "general.file_type") == gguf.LlamaFileType.MOSTLY_F16


def test_projector_q8_0_keeps_odd_rows_f16(tiny_ckpts, tmp_path):
    res = convert_checkpoint(tiny_ckpts(), tmp_path, mmproj_type="q8_0", name="tiny")
    t = _tensors(res.mmproj_path)
    assert t["v.blk.0.attn_q.weight"].tensor_type == QT.Q8_0 and t["mm.0.weight"].tensor_type == QT.Q8_0
    assert t["v.blk.0.ffn_down.weight"].tensor_type == QT.F16  # row length 336 is not a multiple of 32
    assert t["v.patch_embd.weight"].tensor_type == QT.F16 and t["v.blk.0.ln1.weight"].tensor_type == QT.F32
    assert any("336" in n for n in res.plan.notes)
    deq = gguf.quants.dequantize(t["v.blk.0.attn_q.weight"].data, QT.Q8_0)
    ref = convert_checkpoint(tiny_ckpts(), tmp_path / "f32", mmproj_type="f32", name="tiny")
    exact = _tensors(ref.mmproj_path)["v.blk.0.attn_q.weight"].data
    assert np.abs(deq - exact).max() < 0.01 * np.abs(exact).max()


def test_streaming_in_small_blocks_gives_identical_bytes(tiny_ckpts, tmp_path):
    hf = tiny_ckpts()
    plan, ckpt = build_plan(hf, outtype="f16")
    seen = []
    small = write_file(plan.text, ckpt, tmp_path / "small.gguf", block_bytes=4096,
                       progress=lambda s, d, t: seen.append((s, d, t)))
    big = write_file(plan.text, ckpt, tmp_path / "big.gguf")
    assert small.read_bytes() == big.read_bytes()
    done = [d for _, d, _ in seen]
    assert done == sorted(done) and seen[-1] == ("text", plan.text.tensor_bytes, plan.text.tensor_bytes)
    assert len(seen) > len(plan.text.tensors)  # large tensors reported block by block
    assert not list(tmp_path.glob("*.part"))


def test_f16_overflow_is_reported(tiny_ckpts, tmp_path):
    hf = shutil.copytree(tiny_ckpts(dtype="f32", shards=1), tmp_path / "hf")
    plan, ckpt = build_plan(hf, outtype="f16")
    ref = ckpt["model.layers.0.mlp.up_proj.weight"]
    with open(ref.path, "r+b") as fh:
        fh.seek(ref.offset)
        fh.write(np.float32(1e6).tobytes())
    with pytest.raises(ConversionError, match="overflow F16"):
        convert_checkpoint(hf, tmp_path / "out", outtype="f16")
    assert not list((tmp_path / "out").glob("*.gguf*"))  # no partial file left behind


def test_raw_copies_without_copy_file_range_give_identical_bytes(tiny_ckpts, tmp_path, monkeypatch):
    """BF16 tensors are copied in-kernel where possible; the buffered fallback writes the same file."""
    import errno
    import os

    plan, ckpt = build_plan(tiny_ckpts(), outtype="bf16")
    fast = write_file(plan.text, ckpt, tmp_path / "fast.gguf").read_bytes()
    monkeypatch.delattr(os, "copy_file_range", raising=False)
    assert write_file(plan.text, ckpt, tmp_path / "plain.gguf").read_bytes() == fast

    def refuse(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", refuse, raising=False)
    assert write_file(plan.text, ckpt, tmp_path / "fallback.gguf").read_bytes() == fast


def test_tied_config_with_a_stored_lm_head_ignores_it(tiny_ckpts, tmp_path):
    hf = shutil.copytree(tiny_ckpts(), tmp_path / "hf")
    cfg = json.loads((hf / "config.json").read_text())
    cfg["tie_word_embeddings"] = True
    (hf / "config.json").write_text(json.dumps(cfg))
    plan = convert_checkpoint(hf, tmp_path / "out", dry_run=True).plan
    assert "output.weight" not in {t.name for t in plan.text.tensors}
    assert any("lm_head.weight ignored" in n for n in plan.notes)
