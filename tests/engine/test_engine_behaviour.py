"""`LlamaMtmdEngine` behaviour on the tiny model: streaming, cancel, context budget, bad input, threads, sampling."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from speco3.engine import open_engine
from speco3.engine.base import EngineSettings
from speco3.engine.llama import LlamaMtmdEngine
from speco3.engine.worker import EngineWorker
from speco3.errors import ContextFullError, EngineError, ModelFileError

pytestmark = [pytest.mark.llama]

PROMPT = "<|im_start|>user\nDescribe the spectrum.<|im_end|>\n<|im_start|>assistant\n"


def test_streamed_pieces_concatenate_to_the_text(make_engine, images):
    eng = make_engine()
    eng.extend(["<|im_start|>user\n", images[0], PROMPT])
    pieces: list[str] = []
    r = eng.generate(max_tokens=40, on_token=pieces.append)
    assert r.n_tokens == len(eng.conversation()[-1].tokens) and r.n_tokens > 0
    assert "".join(pieces) == r.text
    assert r.stop_reason in ("stop", "length")
    st = eng.stats()
    assert st.tokens_generated == r.n_tokens and st.decode_tokens_per_s > 0 and st.prefill_tokens_per_s > 0
    assert st.backend == "CPU"  # n_gpu_layers=0


def test_greedy_picks_the_argmax_and_sampling_is_seeded(make_engine):
    eng = make_engine()
    eng.extend([PROMPT])
    eng.evaluate()
    best = int(np.argmax(eng.last_logits()))
    eng.generate(max_tokens=1)
    assert eng.conversation()[-1].tokens == [best]

    texts = []
    for _ in range(2):
        hot = make_engine(temperature=1.5, top_k=50, top_p=0.95, seed=7)
        hot.extend([PROMPT])
        texts.append(hot.generate(max_tokens=20).text)
    assert texts[0] == texts[1]


def test_cancel_stops_within_a_token(make_engine):
    eng = make_engine()
    eng.extend([PROMPT])
    cancel = threading.Event()
    seen = []

    def on_token(piece):
        seen.append(len(eng.conversation()[-1].tokens))
        cancel.set()

    r = eng.generate(max_tokens=200, on_token=on_token, cancel=cancel)
    assert r.stop_reason == "cancelled"
    assert r.n_tokens == seen[0]  # no token sampled after the cancel was seen
    # the engine stays usable and the cache holds what was committed
    eng.extend(["<|im_end|>\n" + PROMPT])
    assert eng.generate(max_tokens=3).n_tokens == 3


def test_cancel_before_start_evaluates_and_samples_nothing(make_engine):
    """As a pool's slot: a turn cancelled before it started ends at once (the token loop admits no work for it)."""
    eng = make_engine()
    eng.extend([PROMPT])
    cancel = threading.Event()
    cancel.set()
    r = eng.generate(max_tokens=10, cancel=cancel)
    assert (r.stop_reason, r.n_tokens, r.text, r.prompt_tokens) == ("cancelled", 0, "", 0)
    assert eng.kv_cells == 0
    r = eng.generate(max_tokens=3)  # the conversation is intact
    assert r.n_tokens == 3 and r.prompt_tokens == len(eng.tokenize(PROMPT))


def test_context_full_is_counted_in_kv_cells(make_engine, images):
    eng = make_engine(n_ctx=256)
    n_ctx = eng.stats().n_ctx
    eng.extend(["<|im_start|>user\n", images[0], PROMPT])
    cells = len(eng.tokenize("<|im_start|>user\n")) + 2 + images[0].n_tokens + len(eng.tokenize(PROMPT))
    budget = n_ctx - cells
    with pytest.raises(ContextFullError) as err:
        eng.generate(max_tokens=budget + 1)
    assert f"{cells} KV cells" in str(err.value) and f"n_ctx {n_ctx}" in str(err.value)
    assert eng.kv_cells == 0  # nothing was evaluated
    r = eng.generate(max_tokens=budget)  # exactly fits
    assert r.n_tokens <= budget and eng.kv_cells <= n_ctx


def test_image_that_mtmd_would_resize_is_refused(make_engine, images):
    eng = make_engine()
    img = images[0]
    lying = replace(img, grid=(img.grid[0] - 1, img.grid[1]))
    with pytest.raises(EngineError, match="not the prepared"):
        eng.extend([lying])
    capped = make_engine(image_max_tokens=img.n_tokens - 1)
    with pytest.raises(EngineError, match="above the engine's cap"):
        capped.extend([img])
    assert eng.conversation() == [] and capped.conversation() == []


def test_generate_needs_a_conversation_and_a_budget(make_engine, images):
    eng = make_engine()
    with pytest.raises(EngineError, match="empty"):
        eng.generate(max_tokens=2)
    eng.extend(["<|im_start|>user\n", images[0]])  # mtmd closes the image with <|vision_end|>: text at the end
    assert eng.conversation()[-1].tokens == eng.tokenize("<|vision_end|>")
    with pytest.raises(EngineError, match="at least 1"):
        eng.generate(max_tokens=0)


def test_engine_refuses_calls_from_another_thread(make_engine):
    eng = make_engine()
    errors = []
    t = threading.Thread(target=lambda: errors.append(pytest.raises(EngineError, eng.extend, [PROMPT])))
    t.start()
    t.join()
    assert errors and "thread" in str(errors[0].value)


def test_worker_runs_everything_on_its_thread_and_streams(tiny_pair, images):
    settings = EngineSettings(n_ctx=1024, flash_attn=False, kv_type="f32", n_threads=2, n_gpu_layers=0)
    worker = open_engine(tiny_pair, settings, warmup=False)
    try:
        assert isinstance(worker, EngineWorker) and worker.info.text_path == tiny_pair[0]
        worker.extend(["<|im_start|>user\n", images[0], PROMPT])
        stream = worker.stream(max_tokens=12)
        pieces = list(stream)
        result = stream.result()
        assert "".join(pieces) == result.text and result.images_encoded == 1
        results = []
        t = threading.Thread(target=lambda: results.append(worker.generate(max_tokens=4)))  # any caller thread
        worker.extend(["<|im_end|>\n" + PROMPT])
        t.start()
        t.join()
        assert results[0].n_tokens == 4 and results[0].images_encoded == 0
        assert worker.stats().kv_cells_used == worker.call(lambda: worker.engine.kv_cells)  # on its thread
    finally:
        worker.close()
    with pytest.raises(EngineError, match="closed"):
        worker.extend([PROMPT])


@pytest.fixture
def broken_files(tmp_path, tiny_pair):
    text, mmproj = tiny_pair
    data = Path(text).read_bytes()
    (tmp_path / "truncated.gguf").write_bytes(data[: len(data) // 2])
    (tmp_path / "garbage.gguf").write_bytes(b"\x00garbage" * 1000)
    (tmp_path / "empty.gguf").write_bytes(b"")
    shutil.copy(mmproj, tmp_path / "mmproj.gguf")
    return tmp_path


@pytest.mark.parametrize("which", ["missing", "truncated", "garbage", "empty", "swapped"])
def test_bad_model_files_raise_model_file_error(broken_files, tiny_pair, which):
    text, mmproj = tiny_pair
    pairs = {
        "missing": (broken_files / "nope.gguf", mmproj),
        "truncated": (broken_files / "truncated.gguf", mmproj),
        "garbage": (text, broken_files / "garbage.gguf"),
        "empty": (broken_files / "empty.gguf", mmproj),
        "swapped": (mmproj, text),
    }
    eng = LlamaMtmdEngine(*pairs[which], EngineSettings(n_ctx=512), warmup=False)
    with pytest.raises(ModelFileError):
        eng.load()
    assert not eng.loaded


def test_open_engine_with_an_installed_model_and_the_default(tiny_pair):
    from speco3_models.store import ModelStore

    installed = ModelStore().import_pair(*tiny_pair, name="tiny-test", copy=False)
    settings = EngineSettings(n_ctx=512, n_gpu_layers=0)
    for model in (installed, None, "tiny-test"):  # the object, the store's default, the name
        engine = open_engine(model, settings, threaded=False, warmup=False)
        try:
            assert isinstance(engine, LlamaMtmdEngine) and engine.loaded
            assert engine.info.text_sha256 == installed.text.sha256 and engine.info.quant == installed.quant
            assert engine.stats().n_ctx >= 512 and engine.stats().load_seconds > 0
        finally:
            engine.close()


def test_native_logging_is_silent_and_routed_to_python_debug(tiny_pair, caplog):
    script = (
        "import sys\n"
        "from speco3.engine.llama import LlamaMtmdEngine\n"
        "from speco3.engine.base import EngineSettings\n"
        "e = LlamaMtmdEngine(sys.argv[1], sys.argv[2], EngineSettings(n_ctx=512, n_gpu_layers=0))\n"
        "e.load(); e.extend(['<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'])\n"
        "e.generate(max_tokens=2); e.close()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, *tiny_pair], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout == ""  # warm-up, load and decode print nothing natively

    with caplog.at_level(logging.DEBUG, logger="speco3.engine.llama_cpp_native"):
        engine = LlamaMtmdEngine(*tiny_pair, EngineSettings(n_ctx=512, n_gpu_layers=0), warmup=False)
        engine.load()
        engine.close()
    assert any(r.name == "speco3.engine.llama_cpp_native" and r.levelno == logging.DEBUG for r in caplog.records)


def test_kv_type_and_loading_settings_are_honoured(make_engine, tiny_pair):
    with pytest.raises(EngineError, match="flash attention"):
        LlamaMtmdEngine(*tiny_pair, EngineSettings(kv_type="q8_0", flash_attn=False)).load()
    with pytest.raises(EngineError, match="kv_type"):
        LlamaMtmdEngine(*tiny_pair, EngineSettings(kv_type="int3")).load()
    outs = []
    for overrides in ({"kv_type": "q8_0", "flash_attn": True}, {"use_mmap": True}, {"n_threads": 1}):
        eng = make_engine(**overrides)
        st = eng.stats()
        assert st.extra["kv_type"] == eng.settings.kv_type and st.extra["flash_attn"] == eng.settings.flash_attn
        eng.extend([PROMPT])
        r = eng.generate(max_tokens=4)
        outs.append(r.n_tokens)
    assert outs == [4, 4, 4]
