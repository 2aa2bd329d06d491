"""``spec-o3 export-training``: SFT trajectories, SpecVI-Bench parquet and manifest from real stores and files."""

from __future__ import annotations

import io
import json
import re

import pytest
from PIL import Image

from speco3.agent import get_task
from speco3.agent.protocol import (
    SYSTEM_PROMPT,
    TOOLS_BLOCK,
    parse_answer,
    parse_tool_calls,
    protocol_fingerprint,
)
from speco3.cli import main as cli_main
from speco3.evaluate.bench import BenchFile
from speco3.evaluate.training import chat_messages, rest_window
from speco3.fileio import sha256_file
from speco3.spectra import View, read_spectrum
from speco3.vetting import Decision, ModelVerdict, VettingStore
from speco3.vetting.records import Evidence, SpectrumInfo, spectrum_key
from speco3_testkit.spectra import pillow_render, write_csv_spectrum

HA, HB = Evidence(6500, 6630, "Hα emission"), Evidence(4800, 4920, "Hβ")


def main(argv):
    return cli_main(argv, render=pillow_render)


def decide(store, path, task, verdict, evidence=(), vetter="Ana", comment="") -> str:
    sp = read_spectrum(path)
    key = spectrum_key(sp)
    store.record_spectrum(SpectrumInfo.of(key, sp, sha256_file(path)))
    store.record_decision(Decision(key, task, verdict, vetter=vetter, comment=comment, evidence=list(evidence)))
    return key


@pytest.fixture
def data(tmp_path):
    return tmp_path / "spectra"


@pytest.fixture
def store(tmp_path):
    s = VettingStore(tmp_path / "results.sqlite")
    yield s
    s.close()


def export(tmp_path, store, *extra) -> tuple[int, dict]:
    store.close()
    code = main(["export-training", str(store.path), "--out", str(tmp_path / "out"), *extra])
    path = tmp_path / "out" / "manifest.json"
    return code, json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def records(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "out" / "sft.jsonl").read_text(encoding="utf-8").splitlines()]


def test_two_tasks_give_trajectories_rows_and_counts(tmp_path, data, store, capsys):
    yes = decide(store, write_csv_spectrum(data, 1), "cv", "YES", [HA, HB], comment="Broad Hα and Hβ emission.")
    decide(store, write_csv_spectrum(data, 0), "cv", "NO", [HA])
    decide(store, write_csv_spectrum(data, 2), "cv", "YES")  # no evidence: a parquet row, no trajectory
    decide(store, write_csv_spectrum(data, 3), "cv", "UNSURE", [HA])  # never exported
    decide(store, write_csv_spectrum(data, 4), "carbon", "NO", [Evidence(5100, 5200, "C2 Swan band")])
    code, manifest = export(tmp_path, store)
    assert code == 0, capsys.readouterr().err
    cv, carbon = manifest["counts"]["cv"], manifest["counts"]["carbon"]
    assert cv["parquet"] == {"YES": 2, "NO": 1} and cv["trajectories"] == {"YES": 1, "NO": 1}
    assert cv["no_evidence"] == {"YES": 1} and cv["unsure"] == 1 and cv["decided"] == {"YES": 2, "NO": 1, "UNSURE": 1}
    assert carbon["parquet"] == {"NO": 1} and carbon["trajectories"] == {"NO": 1}
    # the UNSURE decision is left out and said so: counted where the manifest lists it
    assert manifest["totals"] == {"parquet_rows": 4, "trajectories": 3, "left_out": 1}
    assert [(x["left_out"], x["reason"]) for x in manifest["left_out"]] == [("decision", "UNSURE is not a label")]
    # carbon's only label is NO: said on stderr and in the manifest
    assert manifest["warnings"] == ["task carbon: every exported label is NO (1 spectra): a model trained on these "
                                    "learns one answer; add decisions of the other kind"]
    printed = capsys.readouterr()
    assert "warning: task carbon: every exported label is NO" in printed.err
    assert manifest["store"]["sha256"] == sha256_file(tmp_path / "results.sqlite")
    assert manifest["protocol"]["fingerprint"] == protocol_fingerprint()
    assert manifest["prompt_versions"] == {"carbon": get_task("carbon").prompt_version,
                                           "cv": get_task("cv").prompt_version}
    assert manifest["renderer"].endswith("pillow_render") and manifest["models_seen"] == []

    recs = {(r["spectrum_key"], r["task"]): r for r in records(tmp_path)}
    assert len(recs) == 3
    rec = recs[(yes, "cv")]
    turns = rec["conversations"]
    assert [t["from"] for t in turns] == ["system", "human", "gpt", "human", "gpt", "human", "gpt"]
    assert turns[0]["value"] == SYSTEM_PROMPT + TOOLS_BLOCK
    assert turns[1]["value"] == "<image>\n" + get_task("cv").text
    calls = [parse_tool_calls(t["value"])[0].arguments for t in (turns[2], turns[4])]
    assert calls == [{"label": "Hα emission", "wavelength_range": [6500, 6630]},
                     {"label": "Hβ", "wavelength_range": [4800, 4920]}]  # z = 0: the rest frame is the observed
    assert turns[3]["value"] == ("<tool_response>\n<image>Generated spectral visualization focused on wavelength "
                                 "range (6500, 6630) Å for Hα emission.\n</tool_response>")
    final = parse_answer(turns[6]["value"])
    assert final.verdict == "YES" and final.strict and "Broad Hα and Hβ emission." in turns[6]["value"]
    assert rec["ground_truth"] == "YES" and rec["evidence"] == [HA.to_list(), HB.to_list()]
    assert sum(t["value"].count("<image>") for t in turns) == len(rec["images"]) == 3
    for name in rec["images"]:
        with Image.open(tmp_path / "out" / name) as img:
            assert img.width % 28 == 0 and img.height % 28 == 0  # prepared: the processor leaves them as they are
    assert [m["role"] for m in chat_messages(rec)] == ["system", "user", "assistant", "user", "assistant", "user",
                                                      "assistant"]
    (carbon_rec,) = [r for k, r in recs.items() if k[1] == "carbon"]
    assert parse_answer(carbon_rec["conversations"][-1]["value"]).verdict == "NO"

    bench = BenchFile(tmp_path / "out" / "bench.parquet")
    items = list(bench.items())
    assert sorted((i.task, i.truth) for i in items) == [("carbon", "NO"), ("cv", "NO"), ("cv", "YES"), ("cv", "YES")]
    assert all(i.error is None and i.prompt.startswith("<image>\n") for i in items)
    assert all(i.image == pillow_render(View(read_spectrum(data / i.name), None)) for i in items)  # as drawn
    first = next(i for i in items if i.name == "s01.csv")
    sp = read_spectrum(data / "s01.csv")
    assert first.wavelength.tolist() == sp.wavelength.tolist() and first.flux.tolist() == sp.flux.tolist()
    info = json.loads((tmp_path / "out" / "dataset_info.json").read_text())
    assert info["speco3_sft"]["file_name"] == "sft.jsonl" and info["speco3_sft"]["formatting"] == "sharegpt"
    summary = json.loads(printed.out)
    assert summary["trajectories"] == 3 and summary["parquet_rows"] == 4
    assert summary["left_out"] == manifest["totals"]["left_out"] == len(manifest["left_out"]) == 1  # truthful


def test_the_real_renderer_and_the_model_the_vetter_saw_are_recorded(tmp_path, data, store, capsys):
    key = decide(store, write_csv_spectrum(data, 1), "cv", "YES", [HA])
    vid = store.record_model_verdict(ModelVerdict(key, "cv", "YES", "YES", model_id="spec-o3-7b", quant="Q4_K_M",
                                                  text_sha256="a" * 64, mmproj_sha256="b" * 64,
                                                  prompt_version=get_task("cv").prompt_version))
    store.record_decision(Decision(key, "cv", "YES", vetter="Ana", model_verdict_seen="YES", model_verdict_id=vid,
                                   evidence=[HA]))
    store.close()
    assert cli_main(["export-training", str(store.path), "--out", str(tmp_path / "out")]) == 0  # speco3.render
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    assert re.fullmatch(r"speco3\.render [0-9a-f]{12}", manifest["renderer"])
    assert manifest["models_seen"] == [{"model_id": "spec-o3-7b", "quant": "Q4_K_M", "text_sha256": "a" * 64,
                                        "mmproj_sha256": "b" * 64, "decisions": 1,
                                        "prompt_versions": [get_task("cv").prompt_version]}]
    (rec,) = records(tmp_path)
    sizes = []
    for name in rec["images"]:
        with Image.open(tmp_path / "out" / name) as img:
            sizes.append(img.size)
    assert sizes[0] == (784, 476)  # the renderer's full LAMOST-like view (792×472) at the model size
    (item,) = BenchFile(tmp_path / "out" / "bench.parquet").items()
    with Image.open(io.BytesIO(item.image)) as img:
        assert img.size == (792, 472)  # the benchmark's image: the full view as the renderer drew it


def test_only_agreed_keeps_what_two_vetters_said_alike(tmp_path, data, store, capsys):
    agreed = decide(store, write_csv_spectrum(data, 1), "cv", "YES", [HA], vetter="Ana")
    decide(store, data / "s01.csv", "cv", "YES", [HA, HB], vetter="Bo")
    decide(store, write_csv_spectrum(data, 5), "cv", "YES", [HA], vetter="Ana Lopez")
    decide(store, data / "s05.csv", "cv", "YES", [HA], vetter=" ana  lopez")  # one person, spelt twice
    decide(store, write_csv_spectrum(data, 0), "cv", "NO", [HA], vetter="Ana")
    decide(store, data / "s00.csv", "cv", "YES", [HA], vetter="Bo")  # the vetters disagree
    decide(store, write_csv_spectrum(data, 2), "cv", "YES", [HA], vetter="Ana")  # one vetter only
    code, manifest = export(tmp_path, store, "--only-agreed")
    assert code == 0
    cv = manifest["counts"]["cv"]
    assert cv["parquet"] == {"YES": 1} and cv["trajectories"] == {"YES": 1} and cv["not_agreed"] == 3
    # each left out in the manifest, and the stdout's count is the manifest's
    assert manifest["totals"]["left_out"] == len(manifest["left_out"]) == 3
    assert sorted(x["reason"] for x in manifest["left_out"]) == [
        "--only-agreed: decided by one vetter", "--only-agreed: decided by one vetter",
        "--only-agreed: the latest decisions of its 2 vetters differ"]
    (rec,) = records(tmp_path)
    assert rec["spectrum_key"] == agreed and rec["vetter"] == "Bo" and len(rec["images"]) == 3  # the latest: 2 windows
    assert manifest["selection"]["only_agreed"] is True
    # without the option each latest decision counts, and the disagreement is counted
    code, manifest = export(tmp_path / "all", VettingStore(tmp_path / "results.sqlite"))
    assert code == 0
    cv = manifest["counts"]["cv"]
    assert cv["parquet"] == {"YES": 4} and cv["vetters_disagree"] == 1 and cv["not_agreed"] == 0


def test_missing_and_changed_files_are_left_out_with_a_reason(tmp_path, data, store, capsys):
    decide(store, write_csv_spectrum(data, 1), "cv", "YES", [HA])
    gone = decide(store, write_csv_spectrum(data, 0), "cv", "NO", [HA])
    changed = decide(store, write_csv_spectrum(data, 2), "cv", "YES", [HA])
    sp = read_spectrum(write_csv_spectrum(data, 3))  # recorded without a sha256: exported, counted as unverified
    store.record_spectrum(SpectrumInfo.of(spectrum_key(sp), sp))
    store.record_decision(Decision(spectrum_key(sp), "cv", "NO", evidence=[HA]))
    (data / "s00.csv").unlink()
    with open(data / "s02.csv", "a", encoding="utf-8") as fh:
        fh.write("9101,10\n")
    code, manifest = export(tmp_path, store)
    err = capsys.readouterr().err
    assert code == 0
    assert f"left out: {gone} [cv]: spectrum left out: its file" in err and "missing or unreadable" in err
    assert f"left out: {changed} [cv]: spectrum left out" in err and "changed since it was vetted" in err
    cv = manifest["counts"]["cv"]
    assert cv["file_skipped"] == 2 and cv["parquet"] == {"YES": 1, "NO": 1} and cv["file_unverified"] == 1
    assert cv["trajectories"] == {"YES": 1, "NO": 1}
    assert {(x["spectrum_key"], x["left_out"]) for x in manifest["left_out"]} == {(gone, "spectrum"),
                                                                                 (changed, "spectrum")}
    assert len(BenchFile(tmp_path / "out" / "bench.parquet")) == 2 and len(records(tmp_path)) == 2


def test_a_window_the_tool_refuses_costs_the_trajectory_not_the_row(tmp_path, data, store, capsys):
    key = decide(store, write_csv_spectrum(data, 1), "cv", "YES", [HA, Evidence(12000, 12500, "far red")])
    many = decide(store, write_csv_spectrum(data, 3), "cv", "YES",
                  [Evidence(4000 + 500 * i, 4100 + 500 * i, f"w{i}") for i in range(9)])
    code, manifest = export(tmp_path, store)
    assert code == 0
    cv = manifest["counts"]["cv"]
    assert cv["parquet"] == {"YES": 2} and cv["trajectory_skipped"] == 1 and cv["windows_dropped"] == 2
    reasons = {(x["spectrum_key"], x["left_out"]): x["reason"] for x in manifest["left_out"]}
    assert "the zoom tool refused a window: Error: The specified wavelength range [12000, 12500]" in \
        reasons[(key, "trajectory")]
    (rec,) = records(tmp_path)
    assert rec["spectrum_key"] == many and rec["total_tool_calls"] == 7 and rec["total_iterations"] == 8


def test_bad_store_folder_or_task_is_an_error_that_writes_nothing(tmp_path, data, store, capsys):
    decide(store, write_csv_spectrum(data, 1), "cv", "YES", [HA])
    store.close()
    out = tmp_path / "out"
    assert main(["export-training", str(tmp_path / "nope.sqlite"), "--out", str(out)]) == 1
    assert "nope.sqlite: no such vetting store" in capsys.readouterr().err and not out.exists()
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    assert main(["export-training", str(tmp_path / "junk.sqlite"), "--out", str(out)]) == 1
    assert "not a usable vetting store" in capsys.readouterr().err and not out.exists()
    assert main(["export-training", str(store.path), "--out", str(out), "--tasks", "nosuch"]) == 1
    assert "unknown task 'nosuch'" in capsys.readouterr().err and not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export-training", str(store.path), "--out", str(out)]) == 1
    assert "not an empty folder" in capsys.readouterr().err and sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    with VettingStore(store.path) as again:  # a decision on a task whose file is gone: said, not fatal
        again.record_spectrum(SpectrumInfo("/elsewhere/x.fits#0", "x.fits", "/elsewhere/x.fits"))
        again.record_decision(Decision("/elsewhere/x.fits#0", "gone", "YES", evidence=[HA]))
    code, manifest = export(tmp_path / "again", VettingStore(store.path))
    assert code == 0 and manifest["selection"]["tasks"] == ["cv"] and manifest["totals"]["trajectories"] == 1
    assert "task gone: its decisions are left out: the task is not installed" in capsys.readouterr().err
    assert manifest["counts"]["cv"]["file_unverified"] == 0
    with VettingStore(store.path, readonly=True) as again:  # the store is as it was
        assert [d.decision for d in again.decisions("cv")] == ["YES"] and len(again.decisions()) == 2


def test_evaluate_reads_the_exported_parquet(tmp_path, data, store, capsys):
    decide(store, write_csv_spectrum(data, 1), "cv", "YES", [HA])
    decide(store, write_csv_spectrum(data, 0), "cv", "NO")
    decide(store, write_csv_spectrum(data, 4), "carbon", "NO", [Evidence(5100, 5200, "C2")])
    assert export(tmp_path, store)[0] == 0
    capsys.readouterr()
    script = tmp_path / "yes.json"
    script.write_text(json.dumps(["<think>a</think><answer>\\boxed{YES}</answer>"]), encoding="utf-8")
    argv = ["evaluate", str(tmp_path / "out" / "bench.parquet"), "--scripted", str(script), "--out",
            str(tmp_path / "run"), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n"] == 3 and summary["run"]["done"] == 3
    assert summary["tasks"]["cv"]["n"] == 2 and summary["tasks"]["cv"]["accuracy"] == pytest.approx(0.5)
    assert summary["tasks"]["carbon"]["n"] == 1 and summary["tasks"]["carbon"]["accuracy"] == 0


def test_a_window_in_the_observed_frame_becomes_the_rest_frame_range_in_whole_angstrom():
    assert rest_window(Evidence(6600.5, 6700.2), 0.0) == (6600, 6701)
    assert rest_window(Evidence(6564.61 * 1.1, 6600 * 1.1), 0.1) == (6564, 6600)
    z = 0.0123  # a model window [6500, 6600] kept as evidence in the observed frame (0.1 Å) comes back as it was
    assert rest_window(Evidence(round(6500 * (1 + z), 1), round(6600 * (1 + z), 1)), z) == (6500, 6600)
    assert rest_window(Evidence(6499.95, 6500.05), 0.0) == (6499, 6501)  # never an empty range
