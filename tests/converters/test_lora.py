"""PEFT LoRA → GGUF adapter (no torch): metadata, tensor names and shapes, refusals, the model store's base check,
the real engine applying it on the tiny model, and ``spec-o3 convert-lora`` / ``--lora`` end to end.

The numerical parity with transformers (LoRA merged) is `test_lora_parity`."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from converter_helpers import needs_llama
from gguf import GGUFReader

from speco3.cli import main
from speco3.engine.base import EngineSettings, LoraAdapter
from speco3_base.errors import ConversionError, ModelFileError
from speco3_base.fileio import sha256_file
from speco3_converters.lora import convert_lora
from speco3_converters.safetensors_io import tensor_refs
from speco3_models.adapters import BASE_SHA256_KEY, read_adapter
from speco3_models.errors import ModelStoreError
from speco3_models.store import ModelStore
from speco3_testkit.tinylora import make_random_lora
from speco3_testkit.tinymodel import TEXT

TIGHT = dict(n_ctx=512, flash_attn=False, kv_type="f32", n_threads=2, mmproj_on_gpu=False, n_gpu_layers=0)
PROMPT = "<|im_start|>user\nIs this a cataclysmic variable?<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def base(tiny_gguf):
    """The tiny F32 pair and the text GGUF's digest."""
    text, mmproj = tiny_gguf("F32")
    return text, mmproj, sha256_file(text)


def _fields(path):
    reader = GGUFReader(path)
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: t for t in reader.tensors}
    return meta, tensors


@pytest.mark.parametrize("prefix", ["base_model.model.model.language_model.layers", "base_model.model.model.layers"])
def test_adapter_gguf_has_llama_cpp_lora_metadata_names_and_shapes(base, tmp_path, prefix):
    text, _, sha = base
    peft = make_random_lora(tmp_path / "peft", r=8, alpha=16, prefix=prefix)
    res = convert_lora(peft, text, tmp_path / "a.gguf", base_sha256=sha, base_name="tiny")
    meta, tensors = _fields(res.path)
    assert meta["general.architecture"] == "qwen2vl" and meta["general.type"] == "adapter"
    assert meta["adapter.type"] == "lora" and meta["adapter.lora.alpha"] == 16.0
    assert meta[BASE_SHA256_KEY] == sha and meta["speco3.adapter.base_name"] == "tiny"
    kinds = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
    assert sorted(tensors) == sorted(f"blk.{i}.{k}.weight.lora_{ab}" for i in range(TEXT["layers"])
                                     for k in kinds for ab in "ab")
    refs = tensor_refs(peft / "adapter_model.safetensors")
    h, ff = TEXT["hidden"], TEXT["intermediate"]
    kv = TEXT["kv_heads"] * h // TEXT["heads"]
    dims = {"attn_q": (h, h), "attn_k": (h, kv), "attn_v": (h, kv), "attn_output": (h, h), "ffn_gate": (h, ff),
            "ffn_up": (h, ff), "ffn_down": (ff, h)}  # (in, out)
    names = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
             "ffn_down": "mlp.down_proj"}
    for i in range(TEXT["layers"]):
        for k, (n_in, n_out) in dims.items():
            a, b = tensors[f"blk.{i}.{k}.weight.lora_a"], tensors[f"blk.{i}.{k}.weight.lora_b"]
            # GGUF order, as llama_adapter_lora_init checks it against the base matrix [in, out]
            assert [int(d) for d in a.shape] == [n_in, 8] and [int(d) for d in b.shape] == [8, n_out]
            src = f"{prefix}.{i}.{names[k]}"
            np.testing.assert_array_equal(np.asarray(a.data).reshape(8, n_in), refs[f"{src}.lora_A.weight"].read())
            np.testing.assert_array_equal(np.asarray(b.data).reshape(n_out, 8), refs[f"{src}.lora_B.weight"].read())
    info = read_adapter(res.path)
    assert info.ranks == (8,) and len(info.targets) == 14 and info.base_text_sha256 == sha


def test_rank_pattern_alpha_pattern_and_rslora_fold_into_lora_b(base, tmp_path):
    text, _, sha = base
    peft = make_random_lora(tmp_path / "peft", r=8, alpha=16, rank_pattern={"q_proj": 4},
                            alpha_pattern={"down_proj": 4.0})
    res = convert_lora(peft, text, tmp_path / "a.gguf", base_sha256=sha)
    by = {p.target: p for p in res.pairs}
    assert by["blk.0.attn_q.weight"].rank == 4 and by["blk.0.attn_q.weight"].fold == 1.0
    assert by["blk.1.ffn_down.weight"].fold == pytest.approx(4.0 / 16.0)
    assert by["blk.1.ffn_up.weight"].fold == 1.0
    _, tensors = _fields(res.path)
    refs_b = tensor_refs(peft / "adapter_model.safetensors")["base_model.model.model.language_model.layers.1.mlp.down_proj.lora_B.weight"].read()
    got = np.asarray(tensors["blk.1.ffn_down.weight.lora_b"].data).reshape(refs_b.shape)
    np.testing.assert_allclose(got, refs_b * 0.25, rtol=1e-7)
    rs = convert_lora(make_random_lora(tmp_path / "rs", r=16, alpha=8, use_rslora=True), text, tmp_path / "rs.gguf",
                      base_sha256=sha, dry_run=True)
    assert all(p.fold == pytest.approx(math.sqrt(16)) for p in rs.pairs) and rs.path is None
    assert not (tmp_path / "rs.gguf").exists()


def _vision_pair():
    a = np.zeros((8, 128), np.float32)
    return {"base_model.model.model.visual.blocks.0.attn.qkv.lora_A.weight": a,
            "base_model.model.model.visual.blocks.0.attn.qkv.lora_B.weight": np.zeros((384, 8), np.float32)}


@pytest.mark.parametrize(("options", "extra", "message"), [
    ({"use_dora": True}, None, "DoRA"),
    ({}, {"base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_magnitude_vector":
          np.ones(256, np.float32)}, "DoRA magnitude"),
    ({"modules_to_save": ["lm_head"]}, None, "modules_to_save"),
    ({"lora_bias": True}, None, "LoRA biases"),
    ({"peft_type": "IA3"}, None, "only LoRA adapters"),
    ({"alora_invocation_tokens": [1, 2]}, None, "aLoRA"),
    ({}, _vision_pair(), "vision tower"),
    ({}, {"base_model.model.lm_head.lora_A.weight": np.zeros((8, 256), np.float32),
          "base_model.model.lm_head.lora_B.weight": np.zeros((1024, 8), np.float32)}, "lm_head"),
    ({}, {"base_model.model.model.language_model.embed_tokens.lora_embedding_A": np.zeros((8, 1024), np.float32)},
     "embedding LoRA"),
    ({}, {"base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_B.bias": np.zeros(256, np.float32)},
     "LoRA bias"),
])
def test_unmappable_adapters_are_refused_with_the_reason(base, tmp_path, options, extra, message):
    text, _, sha = base
    peft = make_random_lora(tmp_path / "peft", extra_tensors=extra, **options)
    with pytest.raises(ConversionError, match=message):
        convert_lora(peft, text, tmp_path / "a.gguf", base_sha256=sha)
    assert not list(tmp_path.glob("a.gguf*")), "nothing written"


def test_adapter_for_another_base_shape_or_depth_is_refused(base, tmp_path):
    text, mmproj, sha = base
    deeper = make_random_lora(tmp_path / "deep", layers=TEXT["layers"] + 1)
    with pytest.raises(ConversionError, match="blk.2.attn_q.weight, which the base model does not have"):
        convert_lora(deeper, text, tmp_path / "a.gguf", base_sha256=sha)
    peft = make_random_lora(tmp_path / "p")
    with pytest.raises(ModelFileError, match="expected 'qwen2vl'"):  # the projector is no text model
        convert_lora(peft, mmproj, tmp_path / "a.gguf", base_sha256=sha)
    (peft / "adapter_model.safetensors").rename(peft / "adapter_model.bin")
    with pytest.raises(ConversionError, match="adapter_model.bin is PyTorch pickle"):
        convert_lora(peft, text, tmp_path / "a.gguf", base_sha256=sha)


def test_store_lists_adapters_with_their_base_and_refuses_another_base(base, tiny_gguf, tmp_path):
    text, mmproj, sha = base
    store = ModelStore(tmp_path / "store")
    store.import_pair(text, mmproj, "tiny-f32", copy=False)
    other_text, other_mmproj = tiny_gguf("F16")
    store.import_pair(other_text, other_mmproj, "tiny-f16", copy=False)
    res = convert_lora(make_random_lora(tmp_path / "peft"), text, tmp_path / "cv.gguf", base_sha256=sha,
                       base_name="tiny-f32")
    with pytest.raises(ModelStoreError, match=r"made for the base model 'tiny-f32' .*not for 'tiny-f16'"):
        store.add_adapter(res.path, base="tiny-f16")
    assert store.adapters() == []
    a = store.add_adapter(res.path)  # the base found by its digest
    assert a.base_text_sha256 == sha and a.base_name == "tiny-f32" and a.ranks == [8] and a.n_matrices == 14
    assert a.path.parent == store.root / "adapters" and a.path.is_file()
    assert [x.name for x in store.adapters("tiny-f32")] == ["cv"] and store.adapters("tiny-f16") == []
    assert store.base_of(store.get_adapter("cv")).name == "tiny-f32"
    with pytest.raises(ModelStoreError, match="already installed"):
        store.add_adapter(res.path)
    store.remove_adapter("cv")
    assert store.adapters() == [] and not a.path.exists() and res.path.is_file()
    orphan = convert_lora(make_random_lora(tmp_path / "peft2"), text, tmp_path / "orphan.gguf", base_sha256="0" * 64)
    with pytest.raises(ModelStoreError, match="which is not installed"):
        store.add_adapter(orphan.path)
    with pytest.raises(ModelFileError, match="not a LoRA adapter"):
        store.add_adapter(text)


def _logits(text, mmproj, lora=(), info=None):
    from speco3.engine.llama import LlamaMtmdEngine

    engine = LlamaMtmdEngine(text, mmproj, EngineSettings(**TIGHT, lora=tuple(lora)), info, warmup=False)
    try:
        engine.load()
        engine.reset()
        engine.extend([PROMPT])
        engine.evaluate()
        return engine.last_logits(), engine.stats().extra["lora"]
    finally:
        engine.close()


@needs_llama
def test_engine_applies_the_adapter_and_refuses_one_for_another_base(base, tmp_path):
    from speco3.engine.base import ModelInfo

    text, mmproj, sha = base
    res = convert_lora(make_random_lora(tmp_path / "peft"), text, tmp_path / "a.gguf", base_sha256=sha)
    plain, none = _logits(text, mmproj)
    adapted, used = _logits(text, mmproj, [LoraAdapter(str(res.path))])
    off, _ = _logits(text, mmproj, [LoraAdapter(str(res.path), 0.0)])
    assert none == [] and used == [{"path": str(res.path), "scale": 1.0}]
    assert np.isfinite(adapted).all()
    assert float(np.abs(adapted - plain).max()) > 0.1 * float(plain.std()), "the adapter changed nothing"
    np.testing.assert_array_equal(off, plain)  # scale 0: exactly the base
    with pytest.raises(ModelStoreError, match="was made for the base model"):
        _logits(text, mmproj, [LoraAdapter(str(res.path))], ModelInfo(model_id="other", text_sha256="f" * 64))
    with pytest.raises(ModelFileError, match="not a LoRA adapter"):
        _logits(text, mmproj, [LoraAdapter(str(mmproj))])


def test_lora_option_parses_file_and_scale_into_the_engine_settings():
    from speco3.cli import build_parser
    from speco3.cli.options import engine_settings

    for command in (["inspect", "x.fits"], ["vet", "dir", "--out", "r.sqlite"], ["evaluate", "b.parquet"]):
        args = build_parser().parse_args([*command, "--task", "cv", "--lora", "a.gguf", "--lora", "b.gguf:0.5"])
        assert engine_settings(args).lora == (LoraAdapter("a.gguf"), LoraAdapter("b.gguf", 0.5)), command
    assert LoraAdapter.parse("a.gguf") == LoraAdapter("a.gguf", 1.0)
    assert LoraAdapter.parse("dir/a.gguf:0.5") == LoraAdapter("dir/a.gguf", 0.5)
    assert LoraAdapter.parse("C:/x/a.gguf") == LoraAdapter("C:/x/a.gguf", 1.0)


@needs_llama
def test_convert_lora_cli_installs_and_lists_the_adapter(base, tmp_path, capsys):
    text, mmproj, sha = base
    peft = make_random_lora(tmp_path / "my-lora")
    assert main(["models", "import", str(text), str(mmproj), "--name", "tiny", "--link"]) == 0
    assert main(["convert-lora", str(peft), "--base", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "14 matrices, rank 8, alpha 16, base tiny" in out and "installed LoRA adapter my-lora for tiny" in out
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "LoRA adapters" in out and f"my-lora                  for tiny  base sha256 {sha[:12]}" in out
    data = json.loads((main(["models", "list", "--json"]), capsys.readouterr().out)[1])
    assert data["adapters"][0]["base_text_sha256"] == sha and data["adapters"][0]["base_installed"]
    assert main(["convert-lora", str(tmp_path / "nowhere"), "--base", "tiny"]) == 1
    assert "not a folder" in capsys.readouterr().err


@needs_llama
def test_f16_and_bf16_adapters_load_and_stay_close_to_f32(base, tmp_path):
    text, mmproj, sha = base
    peft = make_random_lora(tmp_path / "peft")
    logits = {}
    for outtype in ("f32", "f16", "bf16"):
        res = convert_lora(peft, text, tmp_path / f"{outtype}.gguf", base_sha256=sha, outtype=outtype)
        meta, tensors = _fields(res.path)
        assert {t.tensor_type.name for t in tensors.values()} == {outtype.upper()}
        logits[outtype], _ = _logits(text, mmproj, [LoraAdapter(str(res.path))])
    ref = logits["f32"].astype(np.float64)
    for outtype in ("f16", "bf16"):
        got = logits[outtype].astype(np.float64)
        cosine = float(got @ ref / np.linalg.norm(got) / np.linalg.norm(ref))
        assert cosine > 0.9999 if outtype == "f16" else cosine > 0.999, (outtype, cosine)


@needs_llama
def test_an_adapter_whose_shapes_do_not_fit_is_refused_by_llama_cpp_without_a_crash(base, tmp_path):
    """An adapter with no recorded base (llama.cpp's own converter) on a model given by path: only llama.cpp's shape
    check stands between it and the graph; it must fail cleanly."""
    import gguf

    text, mmproj, sha = base
    path = tmp_path / "foreign.gguf"
    w = gguf.GGUFWriter(path, "qwen2vl")
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", 16.0)
    w.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((8, 512), np.float32))  # the base's input width is 256
    w.add_tensor("blk.0.attn_q.weight.lora_b", np.zeros((256, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert read_adapter(path).base_text_sha256 is None
    with pytest.raises(ModelFileError, match="could not load the LoRA adapter"):
        _logits(text, mmproj, [LoraAdapter(str(path))])
    from speco3.engine.base import ModelInfo

    with pytest.raises(ModelStoreError, match="does not record the base it was made for"):  # an installed model
        _logits(text, mmproj, [LoraAdapter(str(path))], ModelInfo(model_id="tiny", text_sha256=sha))


def test_lora_with_a_server_is_refused(tmp_path):
    from speco3.cli import build_parser
    from speco3.cli.options import engine_settings
    from speco3_base.errors import Speco3Error

    args = build_parser().parse_args(["inspect", "x.fits", "--task", "cv", "--server", "http://127.0.0.1:1",
                                      "--lora", "a.gguf"])
    with pytest.raises(Speco3Error, match="a chat server .* loads its adapters itself"):
        engine_settings(args)


def test_convert_lora_cli_with_a_gguf_base_and_dry_run(base, tmp_path, capsys):
    text, mmproj, sha = base
    peft = make_random_lora(tmp_path / "p", rank_pattern={"q_proj": 4})
    assert main(["convert-lora", str(peft), "--base", str(text), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "model.language_model.layers.0.self_attn.q_proj -> blk.0.attn_q.weight.lora_a/.lora_b  rank 4" in out
    assert "would write" in out and not list(peft.glob("*.gguf"))
    assert main(["convert-lora", str(peft), "--base", str(text), "--out", str(tmp_path / "x.gguf")]) == 0
    out = capsys.readouterr().out
    assert f"sha256 {sha[:12]}" in out and "not installed in the model store" in out
    assert read_adapter(tmp_path / "x.gguf").base_text_sha256 == sha
    assert main(["models", "import", str(text), str(mmproj), "--name", "tiny", "--link"]) == 0
    assert main(["models", "add-adapter", str(tmp_path / "x.gguf"), "--name", "x"]) == 0
    assert "installed LoRA adapter x for tiny" in capsys.readouterr().out
    assert main(["models", "remove-adapter", "x"]) == 0 and main(["models", "remove-adapter", "x"]) == 1
    assert "LoRA adapter 'x' is not installed" in capsys.readouterr().err
