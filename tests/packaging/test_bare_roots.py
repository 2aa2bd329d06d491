"""Opt-in (``SPECO3_PACKAGES=1``; root, network to the Debian mirror, debootstrap, Xvfb, ImageMagick; many
minutes): the Linux packages on bare Debian 12 and 13 roots, with ``scripts/check-packages.sh``.

The packages are those in ``dist/`` (``bash packaging/build-linux.sh`` first; ``SPECO3_PACKAGES_DIST`` names
another folder); the tiny random-weight pair is made here (``speco3_testkit.tinymodel`` + ``spec-o3 convert``).
``SPECO3_PACKAGES_SUITES`` picks the suites (default ``bookworm trixie``). Each check of the script is one line of
its summary; this test asserts every line passed and that the screenshots show a drawn window. Run it with
``SPECO3_TEST_WATCHDOG_S=7200`` (the suite's C-level hang watchdog fires after 420 s otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

pytestmark = [
    pytest.mark.slow,
    pytest.mark.optin("SPECO3_PACKAGES"),  # may skip under SPECO3_STRICT_SKIPS=1 unless SPECO3_PACKAGES=1
    pytest.mark.skipif(os.environ.get("SPECO3_PACKAGES") != "1", reason="set SPECO3_PACKAGES=1 to run"),
    pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs root on Linux"),
]


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory) -> Path:
    from speco3_testkit.tinymodel import make_tiny_qwen25vl

    work = tmp_path_factory.mktemp("tiny")
    checkpoint = make_tiny_qwen25vl(work / "hf")
    data = work / "data"
    env = {**os.environ, "SPECO3_DATA_DIR": str(data)}
    subprocess.run([str(Path(sys.executable).parent / "spec-o3"), "convert", str(checkpoint), "--quant", "Q8_0", "--name",
                    "tiny-test"], env=env, check=True, capture_output=True, timeout=600)
    out = work / "pair"
    out.mkdir()
    (out / "text.gguf").symlink_to(next((data / "models" / "tiny-test").glob("tiny-test-*.gguf")))
    (out / "mmproj.gguf").symlink_to(next((data / "models" / "tiny-test").glob("mmproj-*.gguf")))
    return out


@pytest.mark.timeout(7200)
def test_packages_on_bare_debian_roots(repo, tiny_pair, tmp_path):
    dist = Path(os.environ.get("SPECO3_PACKAGES_DIST", repo / "dist"))
    debs = sorted(dist.glob("spec-o3_*.deb"))  # "+cpu" before "+dl": the build with every backend is taken
    tarballs = sorted(t for t in dist.glob("spec-o3-*-linux-*.tar.gz") if "cuda-addon" not in t.name)
    assert debs and tarballs, f"no packages in {dist}: run bash packaging/build-linux.sh first"
    label = debs[-1].name.split("+", 1)[1].split("_", 1)[0]
    # the CUDA add-on of the same build, when it was made (a build-bundle.sh with the CUDA module)
    addon = sorted(dist.glob(f"spec-o3-cuda_*+{label}_*.deb")), sorted(dist.glob(f"spec-o3-cuda-addon-*-{label}.tar.gz"))
    addon_args = ["--addon-deb", str(addon[0][-1]), "--addon-tarball", str(addon[1][-1])] if all(addon) else []
    suites = os.environ.get("SPECO3_PACKAGES_SUITES", "bookworm trixie")
    run = subprocess.run(["bash", "scripts/check-packages.sh", "--deb", str(debs[-1]), "--tarball", str(tarballs[-1]),
                          "--tiny", str(tiny_pair), "--suites", suites, "--work", str(tmp_path), *addon_args],
                         cwd=repo, capture_output=True, text=True, timeout=7200)
    results = tmp_path / "results"
    summary = (results / "summary.txt").read_text() if (results / "summary.txt").is_file() else ""
    failed = [line for line in summary.splitlines() if not line.startswith("PASS ")]
    assert run.returncode == 0 and summary and not failed, summary + run.stdout[-3000:] + run.stderr[-3000:]
    for suite in suites.split():
        for kind in ("deb", "tar"):
            for check in ("self-test", "window", "inspect"):
                assert any(line.startswith(f"PASS {kind}-{suite} ") and check in line
                           for line in summary.splitlines()), (kind, suite, check, summary)
            with Image.open(results / f"window-{kind}-{suite}.png") as img:
                assert img.size == (1366, 768)
                colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
                assert colours is not None and len(colours) > 200, f"{kind}-{suite}: the screenshot looks blank"
        assert f"PASS deb-{suite} apt-get purge: left behind: nothing" in summary
        assert any(line.startswith(f"PASS deb-{suite} glibc 2.35 refused") for line in summary.splitlines())
        if label == "dl":  # every backend as a module: the CPU with the notice, then Vulkan0 on lavapipe
            for check in ("CPU notice", "inspect on lavapipe"):
                assert any(line.startswith(f"PASS deb-{suite} {check}") for line in summary.splitlines()), check
    figures = json.loads((results / "figures.json").read_text())
    print("\n" + json.dumps(figures, indent=1))
