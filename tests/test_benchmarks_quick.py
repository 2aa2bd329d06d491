"""Every ``benchmarks/bench_*.py`` runs in ``--quick`` mode and prints JSON with the keys the manual names.

The benchmarks are found by file name, so a new one is covered without editing this file. Each declares
``JSON_KEYS`` (the headline keys of its JSON, listed in the benchmark table of docs/contributing/benchmarks.md)
and, when it needs an optional package, ``REQUIRES``; both are read from the source without importing it. Figures are not checked:
timings belong to the benchmarks, not to tests.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "benchmarks").glob("bench_*.py"))


def declared(script: Path, name: str) -> tuple[str, ...]:
    """The tuple of strings assigned to ``name`` at the top level of ``script`` (empty when absent)."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return ()


def readme_rows() -> dict[str, str]:
    """Row of the manual's benchmark table (docs/contributing/benchmarks.md, before its first section) per
    script name."""
    text = (REPO / "docs" / "contributing" / "benchmarks.md").read_text(encoding="utf-8")
    section = text.split("\n## ", 1)[0]
    return {m.group(1): line for line in section.splitlines() if (m := re.match(r"\|\s*`(bench_\w+\.py)", line))}


def test_readme_table_lists_every_benchmark_with_its_json_keys():
    rows = readme_rows()
    assert sorted(rows) == [s.name for s in SCRIPTS], "one row of the manual's table per benchmarks/bench_*.py"
    for script in SCRIPTS:
        keys = declared(script, "JSON_KEYS")
        assert keys, f"{script.name} declares no JSON_KEYS"
        missing = [k for k in keys if f"`{k}`" not in rows[script.name]]
        assert not missing, f"the manual's row of {script.name} does not name {missing}"
        assert f"benchmarks/{script.name}" in rows[script.name], f"no full-size command for {script.name}"


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.stem)
def test_benchmark_runs_quick_and_prints_its_keys(script, tiny_cache_dir, tmp_path):
    for module in declared(script, "REQUIRES"):
        pytest.importorskip(module)
    env = {**os.environ, "SPECO3_TEST_CACHE": str(tiny_cache_dir),
           "QT_QPA_PLATFORM": "offscreen"}
    proc = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, f"{script.name} --quick exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    report = json.loads(proc.stdout)
    missing = [k for k in declared(script, "JSON_KEYS") if k not in report]
    assert not missing, f"{script.name} --quick printed no {missing}"


_REAL_VOCAB = """
import json, sys
from pathlib import Path
from bench_convert import SHAPES, checkpoint_vocab, write_checkpoint
from speco3_converters.hfconfig import load_config
from speco3_converters.tokenizer import load_vocab
folder = Path(sys.argv[1])
rows = SHAPES["7b"][0]["vocab"]
write_checkpoint(folder, 1, shape="quick", shard_bytes=64 << 20, text_overrides={"vocab": rows})
cfg = load_config(folder)
vocab = load_vocab(folder, cfg.text.vocab_size)
print(json.dumps({"shapes": {s: checkpoint_vocab(SHAPES[s][0]["vocab"]) for s in SHAPES},
                  "vocab_size": cfg.text.vocab_size, "n_tokens": len(vocab.tokens), "n_normal": vocab.n_normal,
                  "added": vocab.added, "tokenizer": json.loads((folder / "tokenizer.json").read_text())}))
"""


def test_the_real_shaped_benchmark_checkpoints_carry_the_real_vocabulary(tmp_path):
    """``bench_convert``'s 1.5b and 7b checkpoints (``bench_fit --shape`` converts them) have Qwen2.5-VL's tokenizer,
    so their prompt token counts and prefill times are the real model's; checked on a reduced shape (the quick
    dimensions with the 7B's 152,064 embedding rows), read back with the converter's vocabulary loader."""
    from speco3_testkit import qwenvocab

    proc = subprocess.run([sys.executable, "-c", _REAL_VOCAB, str(tmp_path / "hf")], capture_output=True, text=True,
                          timeout=300, cwd=REPO / "benchmarks")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["shapes"] == {"1.5b": "qwen25", "7b": "qwen25", "quick": "tiny"}
    assert got["vocab_size"] == got["n_tokens"] == 152064 and got["n_normal"] == qwenvocab.N_BPE
    doc, added = qwenvocab.build_qwen25_tokenizer_json()
    assert got["added"] == added and got["tokenizer"] == doc


@pytest.mark.slow
def test_measured_plan_costs_flow_from_bench_parallel_into_bench_adaptive(tiny_cache_dir, tmp_path):
    """``bench_parallel --auto --sections rollouts`` reports each measured plan beside the cost model
    (``cost_model_check``), and ``bench_adaptive --measured`` costs its populations with those figures: a plan that
    was measured costs its measured ratio, K=1 costs 1, and the report says the costs are measured."""
    env = {**os.environ, "SPECO3_TEST_CACHE": str(tiny_cache_dir), "QT_QPA_PLATFORM": "offscreen"}
    bench = REPO / "benchmarks"
    par = subprocess.run([sys.executable, str(bench / "bench_parallel.py"), "--quick", "--auto", "--auto-spectra", "4",
                          "--sections", "rollouts", "--rollouts", "1,4", "--no-distinct", "--spectra", "0",
                          "--auto-runs", "auto_stop_2,auto_stop_4"], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path, env=env)
    assert par.returncode == 0, par.stderr[-3000:]
    report = json.loads(par.stdout)
    check = {r["run"]: r for r in report["auto"]["cost_model_check"]}
    assert sorted(check) == ["auto_stop_2", "auto_stop_4", "k_4"]
    assert (check["auto_stop_2"]["k"], check["auto_stop_2"]["rounds"]) == (2, 1)
    assert (check["auto_stop_4"]["k"], check["auto_stop_4"]["rounds"]) == (4, 2)
    assert check["auto_stop_2"]["wall_over_k1"] == report["rollouts"]["auto_stop_2"]["parallel"]["wall_over_k1"]
    (tmp_path / "par.json").write_text(par.stdout)
    ada = subprocess.run([sys.executable, str(bench / "bench_adaptive.py"), "--quick", "--measured",
                          str(tmp_path / "par.json")], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env=env)
    assert ada.returncode == 0, ada.stderr[-3000:]
    got = json.loads(ada.stdout)
    assert got["cost_model"]["measured"] == report["auto"]["cost_model_check"]
    assert got["cost_model"]["k2_one_round"] == round(check["auto_stop_2"]["wall_over_k1"], 3)
    row = got["populations"][0]
    plans = {tuple(map(int, p.split("/"))): n for p, n in row["plans"].items()}
    assert sum(plans.values()) == row["spectra"]


def test_measured_cost_interpolates_between_measured_plans():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_adaptive import cost, measured_cost
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    check = [{"k": 2, "rounds": 1, "model": cost(2, 1), "wall_over_k1": 1.5},
             {"k": 4, "rounds": 2, "model": cost(4, 2), "wall_over_k1": 3.0},
             {"k": 4, "rounds": 1, "model": cost(4, 1), "wall_over_k1": 2.0}]
    c = measured_cost(check)
    assert c(1, 1) == 1.0 and c(2, 1) == 1.5 and c(4, 2) == 3.0 and c(4, 1) == 2.0
    f2, f4 = 1.5 / cost(2, 1), 3.0 / cost(4, 2)  # the default rule's plans set the ratio; k=4 in one round does not
    assert c(3, 2) == pytest.approx(cost(3, 2) * (f2 + f4) / 2)
    assert c(8, 4) == pytest.approx(cost(8, 4) * f4)  # held beyond the last measured plan


@pytest.mark.slow
def test_bench_convert_keeps_the_converted_pair_for_the_model_benchmarks(tmp_path):
    """``--keep DIR``: the quantized text GGUF and the projector stay (the 7B recipe of docs/contributing/benchmarks.md feeds them to
    bench_parallel); both read back as valid GGUF files of their kind; the scratch folder is gone."""
    from gguf import GGUFReader

    keep, scratch = tmp_path / "pair", tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_convert.py"), "--quick", "--quantize",
                           "Q4_K_M", "--quant-buffers", "256", "--dir", str(scratch), "--keep", str(keep)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in keep.iterdir()) == ["bench-Q4_K_M.gguf", "mmproj-bench-F16.gguf"]
    text, mmproj = GGUFReader(keep / "bench-Q4_K_M.gguf"), GGUFReader(keep / "mmproj-bench-F16.gguf")
    assert any(t.tensor_type.name == "Q4_K" for t in text.tensors)
    assert any(t.name.startswith("v.") for t in mmproj.tensors)
    assert list(scratch.iterdir()) == []
