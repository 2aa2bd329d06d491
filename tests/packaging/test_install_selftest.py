"""The installation self-test: every check passes on a working install and each one fails, with a specific
message, when what it guards is broken."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from PIL import Image, ImageDraw

from speco3 import selftest


def pillow_render(view) -> bytes:
    """A small stand-in for the Qt renderer: a blue polyline, full views larger than zooms (size classes)."""
    x, y = view.data()
    w, h = (560, 340) if view.is_zoom else (790, 470)
    img = Image.new("RGB", (w, h), "white")
    if len(x) > 1:
        xs = (x - x.min()) / max(float(x.max() - x.min()), 1e-9) * (w - 20) + 10
        ys = h - 10 - (y - y.min()) / max(float(y.max() - y.min()), 1e-9) * (h - 20)
        ImageDraw.Draw(img).line(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=(31, 119, 180), width=2)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def blank_render(view) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (500, 300), "white").save(buf, "PNG")
    return buf.getvalue()


def _by_name(results):
    return {r.name: r for r in results}


def test_all_checks_pass_on_this_installation():
    pytest.importorskip("llama_cpp")
    results = selftest.run_self_test(pillow_render)
    names = [r.name for r in results]
    assert names == ["environment", "package data", "qt plugins", "display", "demo spectrum", "render", "agent",
                     "model store", "llama.cpp"]
    failed = {r.name: r.detail for r in results if not r.ok}
    assert not failed
    by = _by_name(results)
    assert "3909 px" in by["demo spectrum"].detail and "lamost" in by["demo spectrum"].detail
    assert "verdict YES" in by["agent"].detail and "not a model" in by["agent"].detail
    assert "no models installed" in by["model store"].detail
    info = by["llama.cpp"].extra
    assert "CPU" in info["backends_built"] and info["devices"]
    assert isinstance(info["gpu_offload"], bool)


def test_a_blank_renderer_fails_the_render_check_only():
    results = _by_name(selftest.run_self_test(blank_render))
    assert not results["render"].ok and "no visible spectrum line" in results["render"].detail
    assert [name for name, r in results.items() if not r.ok] == ["render"]


def test_a_renderer_that_raises_is_a_fail_line_not_a_crash():
    def broken(view):
        raise RuntimeError("no GPU context")

    results = _by_name(selftest.run_self_test(broken))
    assert not results["render"].ok and "RuntimeError: no GPU context" in results["render"].detail
    assert not results["agent"].ok  # the scripted episode cannot show its full view
    assert "traceback" in results["render"].extra


def test_unreadable_demo_spectrum_skips_what_depends_on_it(monkeypatch):
    from speco3.errors import SpectrumReadError

    def fail(*a, **k):
        raise SpectrumReadError("demo.fits", "no COADD table")

    monkeypatch.setattr("speco3.spectra.read_spectrum", fail)
    results = _by_name(selftest.run_self_test(pillow_render))
    assert not results["demo spectrum"].ok and "no COADD table" in results["demo spectrum"].detail
    assert "no demo spectrum" in results["render"].detail and "no demo spectrum" in results["agent"].detail


def test_installed_model_is_verified_and_damage_is_reported(tmp_path):
    from ggufs import write_mmproj_gguf, write_text_gguf

    from speco3_models.store import ModelStore

    text = write_text_gguf(tmp_path / "tiny-text-F32.gguf")
    mmproj = write_mmproj_gguf(tmp_path / "mmproj-tiny-F32.gguf")
    store = ModelStore()
    model = store.import_pair(text, mmproj, "tiny", make_default=True)
    detail = selftest.check_model_store(hashes=True)
    assert "1 installed" in detail and "tiny" in detail and "sha256 checked" in detail
    with open(model.text_path, "r+b") as fh:  # damage the installed copy
        fh.truncate(model.text.size // 2)
    with pytest.raises(selftest.SelfTestError, match="tiny.*FAILED"):
        selftest.check_model_store()


def test_corrupt_store_manifest_fails_the_model_store_check():
    from speco3.config import data_dir

    (data_dir() / "models").mkdir(parents=True)
    (data_dir() / "models" / "manifest.json").write_text("{not json")
    results = _by_name(selftest.run_self_test(pillow_render))
    assert not results["model store"].ok and "manifest" in results["model store"].detail


def test_require_gpu_fails_on_a_cpu_only_build_and_passes_on_a_gpu_build():
    llama = pytest.importorskip("llama_cpp.llama_cpp")
    if llama.llama_supports_gpu_offload():
        _text, info = selftest.check_llama(require_gpu=True)
        assert info["gpu_offload"] is True
        return
    with pytest.raises(selftest.SelfTestError, match="GPU offload required"):
        selftest.check_llama(require_gpu=True)


def test_missing_qt_platform_plugin_is_named(monkeypatch):
    monkeypatch.setitem(selftest.QT_PLATFORMS, sys.platform, ("qoffscreen", "qnosuchplatform"))
    with pytest.raises(selftest.SelfTestError, match="qnosuchplatform"):
        selftest.check_qt_plugins()


def test_report_lines_exit_status_and_json(tmp_path, capsys):
    import argparse

    report = tmp_path / "report.json"
    status = selftest.run_and_report(argparse.Namespace(hashes=False, require_gpu=False, json=str(report)),
                                     render=blank_render)
    out = capsys.readouterr().out.splitlines()
    assert status == 1
    assert out[0].startswith("Spec-o3 Desktop") and out[-1].startswith("RESULT: FAIL (render)")
    assert sum(line.startswith(("PASS  ", "FAIL  ")) for line in out) == 9
    data = json.loads(report.read_text())
    assert data["ok"] is False and [c["name"] for c in data["checks"] if not c["ok"]] == ["render"]


@pytest.mark.gui
def test_command_line_self_test_with_the_real_renderer(tmp_path):
    """``spec-o3 self-test`` in a fresh process: the Qt renderer offscreen, exit status 0, one line per check."""
    pytest.importorskip("llama_cpp")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    report = tmp_path / "st.json"
    run = subprocess.run([sys.executable, "-m", "speco3", "self-test", "--json", str(report)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert sum(line.startswith("PASS  ") for line in lines) == 9 and lines[-1].startswith("RESULT: PASS")
    render = next(c for c in json.loads(report.read_text())["checks"] if c["name"] == "render")
    assert "image tokens" in render["detail"]


@pytest.mark.gui
def test_desktop_entry_point_self_test_and_its_exit_status(tmp_path):
    """``spec-o3-desktop --self-test``: no window, one line per check; a failing check makes the exit status 1."""
    llama = pytest.importorskip("llama_cpp.llama_cpp")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    cmd = [sys.executable, "-m", "speco3.gui.app", "--self-test", "--json", str(tmp_path / "r.json")]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1].startswith("RESULT: PASS")
    assert json.loads((tmp_path / "r.json").read_text())["ok"] is True
    if not llama.llama_supports_gpu_offload():
        run = subprocess.run([*cmd, "--require-gpu"], env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 1 and "FAIL  llama.cpp" in run.stdout
