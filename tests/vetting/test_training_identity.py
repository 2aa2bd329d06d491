"""An exported trajectory is what the model sees: rendered with the tiny GGUF's own chat template and tokenised by the
real llama.cpp engine, it equals the inference episode in which the model asked for the same windows."""

from __future__ import annotations

import json
import re

import gguf
import pytest

from speco3.agent import get_task
from speco3.agent.fidelity import server_prompt
from speco3.agent.loop import run_to_verdict
from speco3.agent.protocol import IM_END, IMAGE_PLACEHOLDER, render_prompt
from speco3.agent.steps import ToolStep
from speco3.engine.chatapi import ServerConfig
from speco3.engine.remote import RemoteEngine, image_url
from speco3.engine.scripted import ScriptedEngine
from speco3.evaluate.training import chat_messages, export_training
from speco3.fileio import sha256_file
from speco3.imaging import PreparedImage, prepare_image
from speco3.spectra import read_spectrum
from speco3.vetting import Decision, VettingStore
from speco3.vetting.records import Evidence, SpectrumInfo, spectrum_key
from speco3_converters.chat_template import render as render_template
from speco3_testkit.spectra import write_csv_spectrum

pytestmark = pytest.mark.llama

try:
    import llama_cpp.mtmd_cpp  # noqa: F401

    HAVE_LLAMA = True
except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1); a broken library raises
    HAVE_LLAMA = False

WINDOWS = [Evidence(6500, 6630, "Hα emission"), Evidence(4800, 4920, "Hβ"), Evidence(4640, 4720, "")]


@pytest.fixture(scope="module")
def tiny(tiny_gguf):
    if not HAVE_LLAMA:
        pytest.skip("llama-cpp-python (with mtmd) is not installed")
    from speco3.engine.base import EngineSettings
    from speco3.engine.llama import LlamaMtmdEngine

    text, mmproj = tiny_gguf("Q8_0")
    engine = LlamaMtmdEngine(text, mmproj, EngineSettings(n_ctx=8192, n_threads=2, n_gpu_layers=0,
                                                          mmproj_on_gpu=False), warmup=False)
    engine.load()
    yield engine, text
    engine.close()


def _tokens(engine, parts) -> list:
    """The conversation as the engine holds it: text token ids, and each image by its pixel digest."""
    engine.reset()
    engine.extend(parts)
    out: list = []
    for seg in engine.conversation():
        out += [("image", seg.image.sha256)] if seg.kind == "image" else seg.tokens
    return out


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A decision with three evidence windows on a CSV spectrum, exported with the training renderer."""
    from speco3.render import render_view  # the training renderer (Qt offscreen)

    tmp_path = tmp_path_factory.mktemp("training")
    path = write_csv_spectrum(tmp_path / "spectra", 1)
    spectrum = read_spectrum(path)
    with VettingStore(tmp_path / "s.sqlite") as store:
        key = spectrum_key(spectrum)
        store.record_spectrum(SpectrumInfo.of(key, spectrum, sha256_file(path)))
        store.record_decision(Decision(key, "cv", "YES", vetter="Ana", comment="Balmer and He II emission.",
                                       evidence=WINDOWS))
    export_training(tmp_path / "s.sqlite", tmp_path / "out", render_view)
    (record,) = [json.loads(line) for line in (tmp_path / "out" / "sft.jsonl").read_text("utf-8").splitlines()]
    return tmp_path, spectrum, record, render_view


def test_a_trajectory_through_the_gguf_template_is_the_episode_the_model_is_fed(tiny, exported):
    engine, text_gguf = tiny
    tmp_path, spectrum, record, render_view = exported

    # the trajectory rendered by the chat template the GGUF carries (as llama-server --jinja / transformers do)
    template = gguf.GGUFReader(text_gguf).get_field("tokenizer.chat_template").contents()
    sft_text = render_template(chat_messages(record), template=template, add_generation_prompt=False)

    # the inference episode: the agent loop on the same spectrum, the model asking for the same windows
    said = [t["value"] for t in record["conversations"] if t["from"] == "gpt"]
    steps, final = run_to_verdict(ScriptedEngine(said), spectrum, get_task("cv"), render_view)
    assert final.verdict == "YES" and final.strict
    windows = [s.wavelength_range for s in steps if isinstance(s, ToolStep) and s.ok]
    assert windows == [(6500, 6630), (4800, 4920), (4640, 4720)]
    conversation = final.extra["conversation"]
    episode_text = render_prompt(conversation)

    # byte for byte, but for the newline a chat template writes after each assistant <|im_end|> (the RL form
    # the app feeds has none: tests/data/protocol/README.md)
    assert sft_text == re.sub(re.escape(IM_END) + r"(?!\n)", IM_END + "\n", episode_text)
    assert sft_text.count(IM_END + "\n") - episode_text.count(IM_END + "\n") == len(said) == 4
    assert sft_text.count(IMAGE_PLACEHOLDER) == len(record["images"]) == 4

    # the exported images are the images the loop fed the model, pixel for pixel
    fed = [p for p in conversation if isinstance(p, PreparedImage)]
    files = [prepare_image((tmp_path / "out" / name).read_bytes()) for name in record["images"]]
    assert [(i.width, i.height, i.sha256) for i in files] == [(i.width, i.height, i.sha256) for i in fed]

    # tokenised by the tiny model's llama.cpp engine: the same tokens and images, plus one "\n" per assistant turn
    pieces = sft_text.split(IMAGE_PLACEHOLDER)
    sft_parts: list = [pieces[0]]
    for image, piece in zip(files, pieces[1:], strict=True):
        sft_parts += [image, piece]
    sft_tokens = _tokens(engine, sft_parts)
    episode_tokens = _tokens(engine, conversation)
    im_end, newline = engine.tokenize(IM_END), engine.tokenize("\n")
    assert len(im_end) == 1 and len(newline) == 1
    expected: list = []
    for i, tok in enumerate(episode_tokens):
        expected.append(tok)
        if tok == im_end[0] and (i + 1 == len(episode_tokens) or episode_tokens[i + 1] != newline[0]):
            expected.append(newline[0])
    assert sft_tokens == expected
    assert sum(t == ("image", f.sha256) for t in sft_tokens for f in files) == 4


def test_llama_server_renders_the_trajectory_with_the_gguf_template_as_we_do(tiny, exported, tiny_llama_server):
    """llama.cpp's own template engine (llama-server --jinja, POST /apply-template) on the exported messages."""
    _, text_gguf = tiny
    tmp_path, _, record, _ = exported
    template = gguf.GGUFReader(text_gguf).get_field("tokenizer.chat_template").contents()
    messages = chat_messages(record)
    images = iter(prepare_image((tmp_path / "out" / name).read_bytes()) for name in record["images"])
    openai = [{"role": m["role"], "content": [image_url(next(images)) if c["type"] == "image" else c
                                              for c in m["content"]]} for m in messages]
    openai = [m if m["role"] == "user" else {"role": m["role"], "content": "".join(c["text"] for c in m["content"])}
              for m in openai]
    prompt = openai[:-1]  # up to the final answer: the prompt the model answers (a last assistant turn is a prefill)
    engine = RemoteEngine(ServerConfig(tiny_llama_server, retries=1))
    try:
        engine.load()
        served = server_prompt(engine, prompt, [])
    finally:
        engine.close()
    ours = render_template(messages[:-1], template=template, add_generation_prompt=True)
    assert served.method == "/apply-template" and served.text == ours
    assert served.text.count(IMAGE_PLACEHOLDER) == len(record["images"]) == 4
