"""Opt-in (``SPECO3_SLURM=1``, root, about a minute): the Slurm job script of the manual (docs/howto/survey.md) on a real one-node cluster.

`scripts/start-slurm.sh` starts MUNGE, slurmctld and slurmd on this machine (Debian ``slurm-wlm`` and ``munge``,
installed by the script when missing). The test takes the manual's section "Splitting a survey over a cluster" as
written, the index command, the job script and the merge command, and changes only paths and sizes (a 2-task array
and ``/2`` shards, one CPU, 2 GB, a 6-spectrum archive of LAMOST files from ``tests/data``); the model is the tiny
random Qwen2.5-VL of the test kit, installed as the default model, run by the real engine. Afterwards the merged
store holds every spectrum of the archive once and no conflict; the cluster is stopped whatever happens.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speco3.vetting import VettingStore

REPO = Path(__file__).resolve().parents[2]
ENV = "SPECO3_SLURM"
pytestmark = [
    pytest.mark.optin(ENV),  # may skip under SPECO3_STRICT_SKIPS=1 unless SPECO3_SLURM=1
    pytest.mark.skipif(os.environ.get(ENV) != "1", reason=f"set {ENV}=1 to start a Slurm cluster (root)"),
    pytest.mark.slow,
    pytest.mark.llama,
    pytest.mark.timeout(900),  # sbatch --wait polls at growing intervals: the array takes about 40 s here
]
SPECTRA = ("spec-55859-F5902_sp01-001.fits.gz", "spec-55859-F5902_sp01-002.fits.gz",
           "spec-55859-F5902_sp01-005.fits.gz", "spec-55859-F5902_sp01-012.fits.gz",
           "spec-60591-LN042429N340750BM01_sp01-001.fits.gz", "spec-60591-LN042429N340750BM01_sp01-004.fits.gz")
#: The manual's text -> what the test runs instead (each must occur: an edit of the page that drops one fails here).
JOB_SIZES = {"--array=0-15": "--array=0-1", "--cpus-per-task=8": "--cpus-per-task=1", "--mem=16G": "--mem=2G",
             "--threads 8": "--threads 1", '/16"': '/2"'}


def readme_cluster_section() -> tuple[str, str, str]:
    """(index command, job script, merge command) of the manual's cluster section (docs/howto/survey.md),
    verbatim."""
    text = (REPO / "docs" / "howto" / "survey.md").read_text(encoding="utf-8")
    section = text.split("\n## Splitting a survey over a cluster", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    index = [b for b in blocks if b.startswith("spec-o3 index")]
    job = [b for b in blocks if b.startswith("#!/bin/bash\n#SBATCH")]
    merge = re.findall(r"`(spec-o3 merge [^`]+)`", section)
    assert len(index) == len(job) == len(merge) == 1, "the manual's cluster section changed shape"
    return index[0], job[0], merge[0]


def substitute(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in text, f"the manual's command no longer has {old!r}"
        text = text.replace(old, new)
    return text


def run(cmd: list[str] | str, cwd: Path, env: dict, timeout: float, shell: bool = False) -> tuple[str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, shell=shell, capture_output=True, text=True, timeout=timeout,
                          executable="/bin/bash" if shell else None)
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout, seconds


@pytest.fixture
def cluster(tmp_path_factory):
    """A running one-node cluster: ``(environment with SLURM_CONF, start seconds)``; stopped afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the Slurm test needs root (slurmd starts the jobs as their user)")
    state = tmp_path_factory.mktemp("slurm")
    script = str(REPO / "scripts" / "start-slurm.sh")
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf")}
    try:
        _, seconds = run([script, "start", str(state)], REPO, env, timeout=600)
        yield env, seconds
    finally:
        stop = subprocess.run([script, "stop", str(state)], capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        for name in ("slurmd.pid", "slurmctld.pid", "munge.dir"):
            assert not (state / name).exists(), f"{name} left behind: a daemon was not stopped"


def test_the_readme_job_array_screens_every_spectrum_once(cluster, tiny_gguf, tmp_path, record_property):
    env, start_s = cluster
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", "QT_QPA_PLATFORM": "offscreen"}
    archive = tmp_path / "survey" / "dr10"  # the archive's path is the same for every task (one node)
    archive.mkdir(parents=True)
    for name in SPECTRA:
        shutil.copy(REPO / "tests" / "data" / "spectra" / "lamost" / name, archive / name)
    text, mmproj = tiny_gguf("Q8_0")
    run(["spec-o3", "models", "import", str(text), str(mmproj), "--name", "tiny", "--default", "--link"], tmp_path,
        env, timeout=120)
    index_cmd, job, merge_cmd = readme_cluster_section()
    work = tmp_path / "work"  # where the user submits from: the index copy, results/ and the job logs
    work.mkdir()
    _, index_s = run(substitute(index_cmd, {"/data/lamost/dr10": str(archive)}), work, env, timeout=300, shell=True)
    (work / "cv.sbatch").write_text(substitute(job, JOB_SIZES), encoding="utf-8")
    _, job_s = run(["sbatch", "--wait", "cv.sbatch"], work, env, timeout=600)
    logs = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in sorted(work.glob("slurm-*.out"))}
    assert len(logs) == 2, logs
    summaries = [json.loads(log.strip().splitlines()[-1]) for log in logs.values()]
    assert sorted(s["shard"] for s in summaries) == ["0/2", "1/2"]
    assert sum(s["done"] for s in summaries) == len(SPECTRA) and not any(s["failed"] for s in summaries), summaries
    out, merge_s = run(merge_cmd, work, env, timeout=300, shell=True)
    report = json.loads(out.strip().splitlines()[-1])
    assert (report["verdicts_added"], report["verdicts_duplicate"], report["conflicts"], report["written"]) == (
        len(SPECTRA), 0, 0, True), report
    with VettingStore(work / "results" / "cv-all.sqlite", readonly=True) as merged:
        runs = merged.model_verdicts("cv", latest=False)
    assert sorted(v.spectrum_key for v in runs) == sorted(f"{archive / name}#0" for name in SPECTRA)
    node_tmp = Path(env.get("TMPDIR") or "/tmp")  # Slurm passes it on, or sets /tmp
    leftovers = list(node_tmp.glob("speco3-index-*.sqlite*"))  # each task removed its copy
    assert not leftovers, leftovers
    figures = {"cluster_start_s": round(start_s, 2), "index_s": round(index_s, 2),
               "job_array_s (sbatch --wait)": round(job_s, 1), "merge_s": round(merge_s, 2),
               "per_shard": {s["shard"]: {"spectra": s["done"], "vet_s": s["seconds"]} for s in summaries}}
    record_property("slurm", figures)
    print("slurm", json.dumps(figures))
