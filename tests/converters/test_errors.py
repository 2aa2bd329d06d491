"""Bad checkpoints and bad GGUF files give specific typed errors; the command line works."""

from __future__ import annotations

import json
import re
import shutil
import struct

import pytest
from converter_helpers import drop_tensors

from speco3.errors import ConversionError, ModelFileError
from speco3_converters import convert_checkpoint
from speco3_converters.__main__ import main as cli_main
from speco3_converters.gguf_stream import write_file
from speco3_converters.qwen25vl import build_plan
from speco3_converters.verify import verify_gguf, verify_pair


@pytest.fixture
def hf(tiny_ckpts, tmp_path):
    """A private copy of the default tiny checkpoint that a test may damage."""
    return shutil.copytree(tiny_ckpts(), tmp_path / "hf")


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if "." in key:
            outer, inner = key.split(".")
            cfg[outer][inner] = value
        elif value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))


@pytest.mark.parametrize(("damage", "message"), [
    (lambda d: (d / "config.json").unlink(), "config.json is missing"),
    (lambda d: _edit_config(d, model_type="llama", architectures=["LlamaForCausalLM"]), "unsupported model"),
    (lambda d: _edit_config(d, vision_config=None), "no vision_config"),
    (lambda d: _edit_config(d, **{"vision_config.fullatt_block_indexes": [0, 3]}), "not equally spaced"),
    (lambda d: _edit_config(d, **{"vision_config.temporal_patch_size": 1}), "temporal_patch_size 1"),
    (lambda d: _edit_config(d, rope_scaling={"type": "default"}), "mrope_section"),
    (lambda d: _edit_config(d, intermediate_size=1024), "shapes do not match"),
    (lambda d: _edit_config(d, vocab_size=512), r"embed_tokens.weight \[1024, 256\] \(expected \[512, 256\]\)"),
    (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    (lambda d: (d / "model-00002-of-00002.safetensors").unlink(), "missing: model-00002-of-00002"),
    (lambda d: drop_tensors(d, {"visual.blocks.3.attn.qkv.weight", "visual.merger.mlp.2.bias"}),
     r"missing 2 \(2 vision, 0 text\)"),
    (lambda d: drop_tensors(d, {"lm_head.weight"}), "no lm_head.weight"),
], ids=["no-config", "llama", "no-vision", "uneven-fullatt", "temporal", "no-mrope", "shape", "vocab",
        "no-tokenizer", "no-shard", "missing-vision", "no-lm-head"])
def test_unsupported_or_incomplete_checkpoint(hf, tmp_path, damage, message):
    damage(hf)
    with pytest.raises(ConversionError, match=message):
        convert_checkpoint(hf, tmp_path / "out", dry_run=True)


def test_truncated_shard_is_named(hf, tmp_path):
    shard = hf / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1000])
    with pytest.raises(ConversionError, match="model-00001-of-00002.safetensors: file is truncated"):
        convert_checkpoint(hf, tmp_path / "out")


def test_unknown_tensor_and_unsupported_dtype(hf, tmp_path):
    from speco3_testkit.tinymodel import write_safetensors

    write_safetensors(hf / "extra.safetensors", {"visual.extra.weight": ("F32", (2,), b"\0" * 8)})
    index = json.loads((hf / "model.safetensors.index.json").read_text())
    index["weight_map"]["visual.extra.weight"] = "extra.safetensors"
    (hf / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConversionError, match="does not know, e.g. visual.extra.weight"):
        convert_checkpoint(hf, tmp_path / "out", dry_run=True)
    write_safetensors(hf / "extra.safetensors", {"visual.extra.weight": ("I64", (1,), b"\0" * 8)})
    with pytest.raises(ConversionError, match="dtype I64"):
        convert_checkpoint(hf, tmp_path / "out", dry_run=True)


def test_bad_output_types(hf, tmp_path):
    with pytest.raises(ConversionError, match="q4_0"):
        convert_checkpoint(hf, tmp_path, outtype="q4_0", dry_run=True)
    with pytest.raises(ConversionError, match="projector type"):
        convert_checkpoint(hf, tmp_path, mmproj_type="q4_k", dry_run=True)


# ------------------------------------------------------------------------------------------- GGUF checks

@pytest.fixture(scope="module")
def pair(tiny_ckpts, tmp_path_factory):
    res = convert_checkpoint(tiny_ckpts(), tmp_path_factory.mktemp("pair"), outtype="f16", name="tiny")
    return res.text_path, res.mmproj_path


def test_verify_good_pair(pair):
    text, mmproj = verify_pair(*pair)
    assert (text["arch"], text["n_layer"], text["n_embd"], text["n_vocab"], text["tied"]) == ("qwen2vl", 2, 256,
                                                                                            1024, False)
    assert text["types"] == {"F16": 16, "F32": 11} and text["file_type"] == 1
    assert (mmproj["projection_dim"], mmproj["n_wa_pattern"], mmproj["n_tensors"]) == (256, 2, 71)
    verify_gguf(pair[0], "text", expect={"n_tensors": 27, "file_type": 1, "allowed_types": ["F16", "F32"],
                                         "tensor_types": {"output.weight": "F16"}, "n_embd": 256,
                                         "metadata": {"qwen2vl.rope.dimension_sections": [8, 12, 12, 0]}})


def test_expectations_not_met_are_listed(pair):
    with pytest.raises(ConversionError, match=r"27 tensors, expected 30; file_type 1, expected 15"):
        verify_gguf(pair[0], "text", expect={"n_tensors": 30, "file_type": 15})
    with pytest.raises(ConversionError, match="output.weight is F16, expected Q6_K"):
        verify_gguf(pair[0], "text", expect={"tensor_types": {"output.weight": "Q6_K"}})


@pytest.mark.parametrize(("kind", "message"), [
    ("mmproj", "architecture is 'qwen2vl', expected 'clip' (vision projector) — this is a text model, not the "
               "vision projector"),
    ("text", "architecture is 'clip', expected 'qwen2vl' (Qwen2.5-VL text model) — this is a vision projector, not "
             "the text model")])
def test_wrong_architecture(pair, kind, message):
    path = pair[0] if kind == "mmproj" else pair[1]
    with pytest.raises(ModelFileError, match=re.escape(message)):
        verify_gguf(path, kind)


def test_corrupt_truncated_and_foreign_files(pair, tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(ModelFileError, match=re.escape("not a GGUF file (no 'GGUF' magic; the file starts with "
                                                       "b'PK\\x03\\x04')")):
        verify_gguf(bad)
    raw = pair[0].read_bytes()
    bad.write_bytes(raw[:-4096])
    with pytest.raises(ModelFileError, match=r"truncated GGUF: tensor '[\w.]+' \(F(16|32) \[[\d, ]+\]\) needs bytes "
                                             r"\d+–\d+ but the file has only \d+ bytes"):
        verify_gguf(bad)
    bad.write_bytes(raw[:5000])  # cut inside the metadata
    with pytest.raises(ModelFileError, match=r"truncated or corrupt GGUF: .* at byte \d+ needs \d+ bytes but the "
                                             r"file has \d+ left \(file size 5000\)"):
        verify_gguf(bad)
    bad.write_bytes(raw[:16] + struct.pack("<Q", 2**60) + raw[24:])  # absurd key count
    with pytest.raises(ModelFileError, match=r"truncated or corrupt GGUF: header claims 1152921504606846976 metadata "
                                             r"entries, more than a \d+-byte file can hold"):
        verify_gguf(bad)
    with pytest.raises(ModelFileError, match=re.escape("cannot read the file (No such file or directory)")):
        verify_gguf(tmp_path / "none.gguf")


def test_missing_tensor_and_bad_window_pattern(tiny_ckpts, tmp_path):
    plan, ckpt = build_plan(tiny_ckpts(), outtype="f16")
    plan.text.tensors = [t for t in plan.text.tensors if t.name != "blk.1.attn_k.bias"]
    path = write_file(plan.text, ckpt, tmp_path / "holed.gguf")
    with pytest.raises(ModelFileError, match=re.escape("incomplete text model (2 blocks declared): missing "
                                                       "blk.1.attn_k.bias")):
        verify_gguf(path, "text")
    plan.mmproj.metadata = [kv if kv.key != "clip.vision.n_wa_pattern" else type(kv)(kv.key, 1, kv.vtype)
                            for kv in plan.mmproj.metadata]
    path = write_file(plan.mmproj, ckpt, tmp_path / "wa1.gguf")
    with pytest.raises(ModelFileError, match=re.escape("clip.vision.n_wa_pattern is 1; a Qwen2.5-VL projector needs "
                                                       "2 … 4 (full-attention block spacing)")):
        verify_gguf(path, "mmproj")


def test_pair_width_mismatch(pair, tiny_ckpts, tmp_path):
    """A projector whose declared output width differs from its merger (and the text model) is refused."""
    plan, ckpt = build_plan(tiny_ckpts(), outtype="f16")
    plan.mmproj.metadata = [kv if kv.key != "clip.vision.projection_dim" else type(kv)(kv.key, 512, kv.vtype)
                            for kv in plan.mmproj.metadata]
    path = write_file(plan.mmproj, ckpt, tmp_path / "wide.gguf")
    with pytest.raises(ModelFileError, match=re.escape("clip.vision.projection_dim is 512 but tensor mm.2.weight "
                                                       "outputs 256 values")):
        verify_pair(pair[0], path)


# ------------------------------------------------------------------------------------------------ CLI

def test_cli_dry_run_and_conversion(tiny_ckpts, tmp_path, capsys):
    assert cli_main([str(tiny_ckpts()), "--out", str(tmp_path), "--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [f["arch"] for f in plan["files"]] == ["qwen2vl", "clip"] and not list(tmp_path.iterdir())
    assert cli_main([str(tiny_ckpts()), "--out", str(tmp_path), "--outtype", "f16", "--name", "t"]) == 0
    out = capsys.readouterr()
    assert "t-F16.gguf" in out.out and "mmproj-t-F16.gguf" in out.out and "100.0 %" in out.err
    assert cli_main([str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 1
    assert "not a folder" in capsys.readouterr().err
