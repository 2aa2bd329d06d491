"""The remote engine against a real llama.cpp ``llama-server`` running the tiny model on loopback.

The server is the binary ``scripts/build-llama-tools.sh`` builds from the llama.cpp sources vendored in
llama-cpp-python (``scripts/setup.sh --tests`` runs it); without it these tests skip, which fails CI under strict
skips. Faults are injected by a small proxy in front of the real server (``speco3_testkit.llamaserver``).
"""

from __future__ import annotations

import json
import logging

import pytest

from speco3.agent import EpisodeOptions, Trace, get_task, run_episode
from speco3.agent.fidelity import check_server, template_file
from speco3.agent.steps import AssistantStep, Outcome, VerdictStep
from speco3.cli import main as cli_main
from speco3.engine.base import EngineSettings
from speco3.engine.chatapi import ServerConfig
from speco3.engine.remote import RemoteEngine
from speco3.vetting import VettingStore
from speco3_testkit.llamaserver import FaultProxy, find_llama_server, llama_server
from speco3_testkit.spectra import make_spectrum, pillow_render, write_csv_archive
from speco3_testkit.spectra import pillow_render as _pillow_render

pytestmark = pytest.mark.llama

SETTINGS = dict(max_tokens_per_turn=24, image_max_tokens=120)
CLEAN_ENDS = {Outcome.YES, Outcome.NO, Outcome.FORMAT_ERROR, Outcome.BUDGET_EXHAUSTED}


def main(argv: list[str], render=_pillow_render) -> int:
    """The CLI with the small Pillow renderer, passed in as `speco3.cli.main` takes it."""
    return cli_main(argv, render=render)



@pytest.fixture(scope="module")
def server(tiny_llama_server):
    return tiny_llama_server




def test_server_prompt_is_the_training_template_byte_for_byte(server):
    report = check_server(ServerConfig(server, retries=1))
    assert not report.error, report.error
    assert report.kind == "llama.cpp" and report.method == "/apply-template"
    assert report.same and report.faithful, report.summary()
    assert report.image_count_from == "usage.prompt_tokens with and without the image"
    assert report.local_image_tokens == 476  # the renderer's full view at the model size, 784×476 px
    assert report.server_zoom_tokens == report.local_zoom_tokens == 273  # its 100 Å zoom, 588×364 px
    # the RL form's one difference is reported as known, and the server counts the image as we do
    assert len(report.known) == 1 and "'\\n'" in report.known[0]
    assert report.server_image_tokens == report.local_image_tokens, report.summary()


def test_server_check_reports_a_foreign_template_byte_by_byte(tiny_gguf, tmp_path):
    exe = find_llama_server()
    if exe is None:
        pytest.skip("llama-server is not built")
    chatml = tmp_path / "chatml.jinja"  # a plain ChatML template: no tools block, images dropped
    chatml.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}", encoding="utf-8")
    text, mmproj = tiny_gguf("Q8_0")
    extra = ("--chat-template-file", str(chatml), "--image-max-tokens", "64")  # and a smaller image budget
    with llama_server(exe, text, mmproj, slots=1, extra=extra) as url:
        report = check_server(ServerConfig(url, retries=1))
        assert main(["server", "check", url]) == 4
    assert not report.error and not report.same
    assert any("# Tools" in d.reference for d in report.differences), report.summary()
    assert report.server_image_tokens < report.local_image_tokens and report.server_zoom_tokens <= 64
    assert "WARNING: the server's prompt differs" in report.summary()
    assert "resizes images differently" in report.summary()
    assert f"→ {report.local_image_tokens} tokens locally, {report.server_image_tokens} on the server" in \
        report.summary()


def test_server_check_tells_a_template_that_fails_on_the_tool_turn_from_a_missing_endpoint(tiny_gguf, tmp_path,
                                                                                           capsys):
    """A server whose template renders the first turn but raises on a tool turn with an image (what vLLM does with
    a checkpoint template that has no place for the zoom image: HTTP 500) is reported as such, with the fix, exit 4;
    the image tokens are still measured on the first turn."""
    exe = find_llama_server()
    if exe is None:
        pytest.skip("llama-server is not built")
    from speco3_converters.chat_template import speco3_chat_template

    breaks = tmp_path / "breaks-on-tool-images.jinja"
    breaks.write_text("{%- for m in messages %}{%- if m.role == 'tool' and (m.content is not string or "
                      "'__media__' in m.content) %}{{ raise_exception('no place for the image of a tool turn') }}"
                      "{%- endif %}{%- endfor %}" + speco3_chat_template(), encoding="utf-8")
    text, mmproj = tiny_gguf("Q8_0")
    with llama_server(exe, text, mmproj, slots=1, extra=("--chat-template-file", str(breaks))) as url:
        rc = main(["server", "check", url])
        out = capsys.readouterr().out
        report = check_server(ServerConfig(url, retries=1))
        arch = write_csv_archive(tmp_path / "arch", 1)  # vet refuses to start: each zoom turn would fail
        assert main(["vet", str(arch), "--task", "cv", "--out", str(tmp_path / "r.sqlite"), "--server", url]) == 1
        assert "fails on a tool turn with an image" in capsys.readouterr().err
    assert rc == 4, out
    assert ("the server's template fails on a tool turn with an image: pass --chat-template "
            f"{template_file()}") in out, out
    assert "no place for the image of a tool turn" in out and "no template endpoint" not in out
    assert report.template_failure and not report.error and not report.faithful
    assert report.server_image_tokens == report.local_image_tokens, report.summary()


def test_episode_against_the_server(server, caplog):
    engine = RemoteEngine(ServerConfig(server), EngineSettings(**SETTINGS))
    engine.load()
    pieces: list[str] = []
    trace = Trace()
    steps = list(trace.follow(run_episode(engine, make_spectrum(), get_task("cv"), pillow_render,
                                          EpisodeOptions(on_token=pieces.append, max_turns=3))))
    final = steps[-1]
    assert isinstance(final, VerdictStep) and final.outcome in CLEAN_ENDS, final.detail
    turns = [s for s in steps if isinstance(s, AssistantStep)]
    assert turns and all(s.stop_reason in ("stop", "length") for s in turns)
    assert "".join(pieces) == "".join(s.text for s in turns)  # streamed as generated, each piece once
    sent = engine.messages()
    assert sent[0]["role"] == "system" and sent[1]["content"][0]["type"] == "image_url"
    assert [m["content"] for m in sent if m["role"] == "assistant"] == [s.text for s in turns]  # verbatim
    engine.close()


def test_inspect_cli_against_the_server(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPECO3_TEST_KEY", "sk-secret-never-written")
    arch = write_csv_archive(tmp_path / "arch", 1)
    out = tmp_path / "trace"
    rc = main(["inspect", str(arch / "s00.csv"), "--task", "cv", "--server", server, "--api-key-env",
               "SPECO3_TEST_KEY", "--max-tokens-per-turn", "24", "--max-turns", "3", "--out", str(out)])
    printed = capsys.readouterr()
    assert rc in (0, 3), printed.err
    saved = json.loads((out / "trace.json").read_text(encoding="utf-8"))
    assert saved["model"]["server"] == server and saved["settings"]["server"] == server
    everything = printed.out + printed.err + "".join(p.read_text(errors="replace") for p in out.rglob("*.json"))
    assert "sk-secret" not in everything


def test_vet_concurrency_4_with_faults_records_every_spectrum_once(server, tmp_path, monkeypatch, capsys, caplog):
    """20 spectra, 4 in flight through a proxy that drops connections, answers 500 and 429 (Retry-After), cuts
    streams and stalls past the request timeout: the run completes, each spectrum recorded exactly once."""
    arch = write_csv_archive(tmp_path / "arch", 20)
    db = tmp_path / "r.sqlite"
    plan = ["pass", "drop", "500", "pass", "429", "truncate", "pass", "slow", "drop", "500", "truncate", "429"]
    caplog.set_level(logging.WARNING, logger="speco3.engine.chatapi")
    with FaultProxy(server, plan, slow_s=12.0) as proxy:
        rc = main(["vet", str(arch), "--task", "cv", "--out", str(db), "--server", proxy.url, "--concurrency", "4",
                   "--max-tokens-per-turn", "24", "--max-turns", "3", "--request-timeout", "6", "--retries", "6"])
        injected = list(proxy.faults)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and summary["done"] == 20 and summary["failed"] == 0, summary
    assert sorted(injected) == sorted(f for f in plan if f != "pass")
    retried = " | ".join(r.getMessage() for r in caplog.records if "retry" in r.getMessage())
    assert retried.count("retry") >= len(injected), retried  # every fault cost a retry
    for reason in ("HTTP 500", "HTTP 429", "ReadTimeout", "disconnected"):  # slow = past the request timeout
        assert reason in retried, reason
    assert "garbled stream" in retried or "ended before the answer was finished" in retried  # cut streams
    with VettingStore(db, readonly=True) as s:
        rows = s.model_verdicts("cv", latest=False)
    assert len(rows) == 20 and len({r.spectrum_key for r in rows}) == 20
    assert {r.outcome for r in rows} <= {o.value for o in CLEAN_ENDS}, {r.outcome for r in rows}
    assert all(r.engine_settings["server"] == proxy.url for r in rows)
    # resume: nothing left to do
    rc = main(["vet", str(arch), "--task", "cv", "--out", str(db), "--server", server, "--model", rows[0].model_id,
               "--concurrency", "4", "--max-tokens-per-turn", "24"])
    assert rc == 0 and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["skipped"] == 20


def test_a_dead_server_is_recorded_as_engine_error_and_retried_on_resume(server, tmp_path, monkeypatch, capsys):
    arch = write_csv_archive(tmp_path / "arch", 3)
    db = tmp_path / "r.sqlite"
    argv = ["vet", str(arch), "--task", "cv", "--out", str(db), "--concurrency", "2", "--max-tokens-per-turn", "8",
            "--max-turns", "2", "--retries", "1"]
    with FaultProxy(server, ["500"] * 200) as proxy:  # the model list passes, every completion fails
        rc = main([*argv, "--server", proxy.url])
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and first["outcomes"] == {"engine_error": 3}
    with VettingStore(db, readonly=True) as s:
        assert all("HTTP 500" in r.detail for r in s.model_verdicts("cv", latest=False))
    assert main([*argv, "--server", server]) == 0
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert second["done"] == 3 and second["skipped"] == 0 and "engine_error" not in second["outcomes"]


def test_first_turn_greedy_answer_matches_the_in_process_engine(server, tiny_gguf):
    """Same model file, same prompt bytes, same image pixels, greedy: the server writes what the local engine
    writes (the end-to-end proof that the messages reach the model as the local markup does)."""
    from speco3.agent import protocol as p
    from speco3.engine.llama import LlamaMtmdEngine
    from speco3.imaging import prepare_image
    from speco3.spectra.view import View

    image = prepare_image(pillow_render(View(make_spectrum())), max_tokens=120)
    messages = p.first_turn_messages(image, get_task("cv").text)
    text, mmproj = tiny_gguf("Q8_0")
    settings = EngineSettings(n_ctx=4096, n_threads=2, n_gpu_layers=0, mmproj_on_gpu=False, image_max_tokens=120,
                              max_tokens_per_turn=12)
    local = LlamaMtmdEngine(text, mmproj, settings, warmup=False)
    local.load()
    local.reset()
    local.extend(p.markup(messages))
    mine = local.generate()
    local.close()
    remote = RemoteEngine(ServerConfig(server), settings)
    remote.load()
    remote.reset()
    remote.extend_messages(messages)
    theirs = remote.generate()
    remote.close()
    assert theirs.text == mine.text and theirs.stop_reason == mine.stop_reason, (theirs.text, mine.text)
    assert theirs.n_tokens == mine.n_tokens


def test_logprobs_are_requested_from_the_server_when_asked(server):
    from speco3.agent import protocol as p
    from speco3.imaging import prepare_image
    from speco3.spectra.view import View

    engine = RemoteEngine(ServerConfig(server), EngineSettings(max_tokens_per_turn=6))
    engine.settings.top_logprobs = 3  # the setting the logprob-recording engines read
    engine.load()
    engine.reset()
    engine.extend_messages(p.first_turn_messages(prepare_image(pillow_render(View(make_spectrum())), 120), "T"))
    res = engine.generate()
    engine.close()
    assert len(res.logprobs) == res.n_tokens > 0
    assert all(lp.logprob <= 0 and len(lp.top) == 3 and lp.top[0][1] >= lp.top[-1][1] for lp in res.logprobs)
    assert "".join(lp.token for lp in res.logprobs) == res.text  # greedy: each token is its top candidate
    assert all(lp.token == lp.top[0][0] for lp in res.logprobs)


def test_concurrent_vet_cancelled_then_resumed_records_each_spectrum_once(server, tmp_path):
    import threading

    from speco3.vetting.schedulers import on_threads
    from speco3.vetting.screening import Recorded, Screening, Skipped, VetItem, vet

    def vet_concurrent(items, store, engines, task, render, cancel=None, on_event=None):
        return vet(Screening(store, task, render, cancel=cancel), items, on_threads(engines), engines[0].info.model_id,
                   on_event=on_event)

    items = [VetItem(key=f"/d/s{i}.fits#0", load=lambda i=i: make_spectrum(name=f"s{i}", seed=i), name=f"s{i}")
             for i in range(8)]
    settings = EngineSettings(**SETTINGS)

    def engines(n):
        first = RemoteEngine(ServerConfig(server), settings)
        first.load()
        return [first] + [RemoteEngine(first.config, settings, client=first.client) for _ in range(n - 1)]

    cancel = threading.Event()
    seen: list[str] = []

    def on_event(event):
        if isinstance(event, Recorded | Skipped):
            seen.append(event.item.key)
            if len(seen) == 2:
                cancel.set()  # Ctrl-C: the episodes in flight stop between tokens and are not recorded

    store = VettingStore(tmp_path / "r.sqlite")
    task = get_task("cv")
    opened = [engines(3), engines(3)]
    first = vet_concurrent(items, store, opened[0], task, pillow_render, cancel=cancel, on_event=on_event)
    assert first.cancelled and 2 <= first.done < 8
    second = vet_concurrent(items, store, opened[1], task, pillow_render)
    for e in [*opened[0][::-1], *opened[1][::-1]]:
        e.close()
    assert not second.cancelled and second.skipped == first.done and second.done == 8 - first.done
    rows = store.model_verdicts("cv", latest=False)
    assert len(rows) == 8 and len({r.spectrum_key for r in rows}) == 8
    store.close()


def test_vet_against_the_server_records_what_served_it(server, tmp_path, capsys):
    """``vet --server`` records the server's own context per conversation and its slots (the fixture runs ``-np 4
    -c 16384``), not the in-process engine's defaults; what the server reports about its model (file, size,
    build); that the files' digests are not verified; and none of the local engine's loading options."""
    arch = write_csv_archive(tmp_path / "arch", 1)
    db = tmp_path / "r.sqlite"
    rc = main(["vet", str(arch), "--task", "cv", "--out", str(db), "--server", server, "--max-tokens-per-turn", "8",
               "--max-turns", "2", "--n-ctx", "2048"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "context 4096 per conversation, 4 slots, file type Q8_0); file digests: unknown, not verified" in err
    with VettingStore(db, readonly=True) as s:
        (v,) = s.model_verdicts("cv")
    es = v.engine_settings
    reported = es["server_reports"]
    assert (es["n_ctx"], es["n_seq"]) == (4096, 4) == (reported["n_ctx"], reported["slots"])
    assert reported["kind"] == "llama.cpp" and reported["model"] == v.model_id
    assert reported["model_path"].endswith(".gguf") and reported["size_bytes"] > 0 and reported["n_params"] > 0
    assert reported["build"] and reported["digests"].startswith("unknown, not verified")
    assert v.quant == reported["quant"] == "Q8_0"  # the file type the server reports
    assert v.text_sha256 is None and v.mmproj_sha256 is None  # nothing claimed that was not checked
    assert not {"n_threads", "n_gpu_layers", "flash_attn", "kv_type", "use_mmap"} & set(es)
