"""Parity of our GGUFs (run by llama.cpp + mtmd) with transformers' Qwen2_5_VLForConditionalGeneration.

Same tiny bf16 checkpoint, same 224x168 image (sides multiples of 28), same prompt token ids (taken from
mtmd's tokenization, image tokens expanded for transformers), F32 KV cache and flash attention off in
both the llama and the mtmd context. Bounds: last-token cosine >= 0.9999 and 16/16 greedy tokens equal.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from converter_helpers import needs_llama

from speco3_converters import convert_checkpoint
from speco3_converters.hfconfig import CLIP_MEAN, CLIP_STD
from speco3_testkit.smoke import smoke_test

pytestmark = [pytest.mark.parity, pytest.mark.llama, needs_llama]
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

N_PREDICT = 16


@pytest.fixture(scope="module")
def reference(tiny_ckpts, test_image, tmp_path_factory):
    """transformers' logits and greedy tokens, computed once for the prompt mtmd builds."""
    from hf_reference import hf_forward

    hf = tiny_ckpts()
    res = convert_checkpoint(hf, tmp_path_factory.mktemp("probe"), outtype="f32", mmproj_type="f32", name="tiny")
    layout = smoke_test(res.text_path, res.mmproj_path, test_image, n_predict=0)["layout"]
    cfg = json.loads((hf / "config.json").read_text())
    logits, tokens = hf_forward(hf, test_image, layout, cfg["image_token_id"], CLIP_MEAN, CLIP_STD, N_PREDICT)
    return hf, layout, logits, tokens


@pytest.mark.parametrize("outtype", ["f32", "f16"])
def test_logits_and_greedy_tokens_match_transformers(reference, test_image, tmp_path, outtype, record_property):
    hf, layout, ref_logits, ref_tokens = reference
    res = convert_checkpoint(hf, tmp_path, outtype=outtype, mmproj_type=outtype, name="tiny")
    ours = smoke_test(res.text_path, res.mmproj_path, test_image, n_predict=N_PREDICT, f32_kv=True,
                      flash_attn=False)
    assert ours["layout"] == layout
    a, b = ours["logits"].astype(np.float64), ref_logits.astype(np.float64)
    cosine = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    equal = sum(x == y for x, y in zip(ours["tokens"], ref_tokens, strict=True))
    figures = {"outtype": outtype, "cosine": cosine, "max_abs_diff": float(np.abs(a - b).max()),
               "logit_std": float(b.std()), "greedy_equal": f"{equal}/{N_PREDICT}"}
    record_property("parity", figures)
    print("parity", json.dumps(figures))
    assert cosine >= 0.9999, figures
    assert ours["tokens"] == ref_tokens, figures


_TOKENIZE = """
import json, sys, llama_cpp
llm = llama_cpp.Llama(sys.argv[1], vocab_only=True, verbose=False)
texts = json.loads(sys.stdin.read())
print(json.dumps([llm.tokenize(t.encode(), add_bos=False, special=True) for t in texts]))
"""


def test_tokenizer_matches_hf_tokenizers(tiny_ckpts, tmp_path):
    """llama.cpp with ``pre = qwen2`` splits text exactly like the Hugging Face tokenizer."""
    import subprocess
    import sys

    tokenizers = pytest.importorskip("tokenizers")
    hf = tiny_ckpts()
    res = convert_checkpoint(hf, tmp_path, outtype="f16", name="tiny")
    texts = ["Analyze the provided spectrum: Hα at 6563 Å, [4800, 4920] and 12345.678!",
             "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>\nTASK TEXT<|im_end|>\n",
             "<tool_call>\n{\"name\": \"spectral_visualization_tool\", \"arguments\": {}}\n</tool_call>",
             "  leading spaces,\ttabs\n\nnewlines   and 'quotes' it's we'll DON'T  ",
             "Ünïcödé — 中文 ☃ emoji 🙂 <think>x</think><answer>\\boxed{YES}</answer>"]
    proc = subprocess.run([sys.executable, "-c", _TOKENIZE, str(res.text_path)], input=json.dumps(texts),
                          capture_output=True, text=True, timeout=120, check=True)
    ours = json.loads(proc.stdout.strip().splitlines()[-1])
    ref = tokenizers.Tokenizer.from_file(str(hf / "tokenizer.json"))
    for text, ids in zip(texts, ours, strict=True):
        assert ids == ref.encode(text, add_special_tokens=False).ids, text
