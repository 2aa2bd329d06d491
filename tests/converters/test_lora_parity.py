"""Parity of a converted PEFT LoRA run by llama.cpp with transformers running the same LoRA merged into the model.

A random LoRA (PEFT with ``init_lora_weights=False``: A and B both random, B not zero) on every text-model attention
and MLP projection of the tiny bf16 checkpoint, saved by PEFT itself; `speco3_converters.lora` converts it against
the F16 text GGUF; llama.cpp (F32 KV cache, flash attention off) applies it at scale 1 through
``llama_set_adapters_lora``. The reference is transformers with the LoRA merged (``merge_and_unload``). Bounds as in
the converter's parity tests: last-token cosine >= 0.9999 and 16/16 greedy tokens equal. The variants cover PEFT's
per-module ranks and alphas (``rank_pattern``, ``alpha_pattern``) and rsLoRA, whose scalings the converter folds into
``lora_b``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from converter_helpers import needs_llama

from speco3_base.fileio import sha256_file
from speco3_converters import convert_checkpoint
from speco3_converters.hfconfig import CLIP_MEAN, CLIP_STD
from speco3_converters.lora import convert_lora
from speco3_testkit.smoke import smoke_test

pytestmark = [pytest.mark.parity, pytest.mark.llama, needs_llama]
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

N_PREDICT = 16
TEXT_TARGETS = r"model\.language_model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)"
VARIANTS = {
    "plain": {},
    "patterns": {"rank_pattern": {"q_proj": 4, "down_proj": 12}, "alpha_pattern": {"v_proj": 40.0, "up_proj": 6.0}},
    "rslora": {"use_rslora": True},
}


@pytest.fixture(scope="module")
def base(tiny_ckpts, test_image, tmp_path_factory):
    """The tiny checkpoint, its F16 text GGUF + projector, and mtmd's prompt layout for the test image."""
    hf = tiny_ckpts()
    res = convert_checkpoint(hf, tmp_path_factory.mktemp("lora-base"), outtype="f16", mmproj_type="f16", name="tiny")
    layout = smoke_test(res.text_path, res.mmproj_path, test_image, n_predict=0)["layout"]
    from hf_reference import hf_forward

    cfg = json.loads((hf / "config.json").read_text())
    base_logits, _ = hf_forward(hf, test_image, layout, cfg["image_token_id"], CLIP_MEAN, CLIP_STD, 1)
    return hf, res.text_path, res.mmproj_path, layout, base_logits


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_lora_logits_and_greedy_tokens_match_transformers_merged(base, test_image, tmp_path, variant,
                                                                 record_property):
    from hf_reference import hf_forward
    from transformers import Qwen2_5_VLForConditionalGeneration

    hf, text, mmproj, layout, base_logits = base
    torch.manual_seed(1)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(hf, dtype=torch.float32)
    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=TEXT_TARGETS, init_lora_weights=False,
                             lora_dropout=0.0, **VARIANTS[variant])
    lora_model = peft.get_peft_model(model, config)
    peft_dir = tmp_path / "peft"
    lora_model.save_pretrained(peft_dir)
    merged = lora_model.merge_and_unload()
    merged_dir = tmp_path / "merged"
    merged.save_pretrained(merged_dir)

    res = convert_lora(peft_dir, text, tmp_path / "adapter.gguf", base_sha256=sha256_file(text), base_name="tiny")
    assert len(res.pairs) == 2 * 7
    cfg = json.loads((hf / "config.json").read_text())
    ref_logits, ref_tokens = hf_forward(merged_dir, test_image, layout, cfg["image_token_id"], CLIP_MEAN, CLIP_STD,
                                        N_PREDICT)
    ours = smoke_test(text, mmproj, test_image, n_predict=N_PREDICT, f32_kv=True, flash_attn=False,
                      lora=[[str(res.path), 1.0]])
    assert ours["layout"] == layout
    a, b = ours["logits"].astype(np.float64), ref_logits.astype(np.float64)
    cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    c = base_logits.astype(np.float64)
    base_cosine = float(c @ b / np.linalg.norm(c) / np.linalg.norm(b))
    equal = sum(x == y for x, y in zip(ours["tokens"], ref_tokens, strict=True))
    figures = {"variant": variant, "cosine": cosine, "max_abs_diff": float(np.abs(a - b).max()),
               "base_vs_merged_cosine": base_cosine, "greedy_equal": f"{equal}/{N_PREDICT}",
               "ranks": res.ranks}
    record_property("lora_parity", figures)
    print("lora parity", json.dumps(figures))
    assert base_cosine < 0.999, f"the LoRA barely changes the logits; the test would not see a dropped adapter: {figures}"
    assert cosine >= 0.9999, figures
    assert ours["tokens"] == ref_tokens, figures
