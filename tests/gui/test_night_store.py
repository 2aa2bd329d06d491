"""Screen at night with ``spec-o3 vet``, vet by day in the app (issue #44 item 1): a real ``vet`` process writes the
store, the app opens it by ``spec-o3-desktop --store S ARCHIVE``, by File → Open store… and found beside the
archive; the table shows its verdicts, p(YES) and abstentions, the agent pane its traces, and a decision lands in
that store. A store of another archive is refused, the one in use kept; the choice is remembered per archive."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from speco3.gui.archive_model import ABSTAINED_ROLE, COL, P_YES_ROLE
from speco3.gui.settings import AppSettings
from speco3.vetting import VettingStore
from speco3.vetting.records import ModelVerdict
from speco3.vetting.store import ARCHIVE_ROOT_STATE

pytestmark = pytest.mark.gui

ZOOM = ("<think>Zoom on Hβ.</think>\n<tool_call>\n{\"name\": \"spectral_visualization_tool\", \"arguments\": "
        "{\"label\": \"Hβ\", \"wavelength_range\": [4800, 4920]}}\n</tool_call>")
YES = "<think>Emission.</think>\n<answer>\\boxed{YES}</answer> Balmer emission."
NO = "<think>Flat.</think>\n<answer>\\boxed{NO}</answer> No emission."


def _vet(archive: Path, out: str, cwd: Path, script: dict, *extra: str) -> dict:
    """A real ``spec-o3 vet`` process with a scripted engine (run in ``cwd``, ``--out`` as given)."""
    path = cwd / f"script-{len(list(cwd.glob('script-*.json')))}.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "speco3", "vet", str(archive), "--task", "cv", "--out", out,
                          "--scripted", str(path), *extra], capture_output=True, text=True, timeout=600, cwd=cwd,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> tuple[Path, Path]:
    """A demo archive screened by two ``vet`` runs into ``night/r.sqlite`` (relative ``--out``, run one folder up):
    half greedily (YES or NO by image), half with 3 rollouts that split 2 YES / 1 NO (abstained, p(YES) 0.67)."""
    from speco3.demo import write_demo_archive

    base = tmp_path_factory.mktemp("night")
    master = write_demo_archive(base / "archive")[0].parent
    (base / "night").mkdir()
    env = os.environ.copy()
    try:  # the runs' caches and settings in a folder of their own (the tests' are per test)
        for name in ("CONFIG", "DATA", "CACHE"):
            os.environ[f"SPECO3_{name}_DIR"] = str(base / name.lower())
        first = _vet(master, "night/r.sqlite", base, {"scripts": [[ZOOM, YES], [NO]], "select": "image"},
                     "--shard", "0/2")
        second = _vet(master, "night/r.sqlite", base, {"scripts": [[YES], [YES], [NO]], "select": "seed"},
                      "--shard", "1/2", "--rollouts", "3")
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert first["done"] + second["done"] == 20 and second["abstained"] == second["done"] > 0
    return master, base / "night" / "r.sqlite"


@pytest.fixture
def screened(night, tmp_path) -> tuple[Path, Path]:
    """The screened archive and a private copy of its night store (decisions are written to it)."""
    master, store = night
    copy = tmp_path / "night" / "r.sqlite"
    copy.parent.mkdir()
    shutil.copy(store, copy)  # closed by `vet`: everything is in the file (no -wal left)
    shutil.copytree(store.with_name("r_traces"), copy.with_name("r_traces"))  # the night's folder copied whole
    return master, copy


def _table(w) -> dict[str, tuple]:
    """Spectrum name -> (model column, p(YES) shown, p(YES), abstained) of every row."""
    m = w.table_model
    m.fetch_all()
    out = {}
    for r in range(m.rowCount()):
        conf = m.index(r, COL["confidence"])
        out[m.data(m.index(r, COL["name"]))] = (m.data(m.index(r, COL["model"])), m.data(conf),
                                               m.data(conf, P_YES_ROLE), m.data(conf, ABSTAINED_ROLE))
    return out


def _check_night_table(w, store: Path) -> None:
    rows = _table(w)
    assert len(rows) == 20
    models = [r[0] for r in rows.values()]
    abstained = [r for r in rows.values() if r[3]]
    assert models.count("abstained") == len(abstained) > 0  # the K=3 half: abstained, p(YES) 0.67 shown with "?"
    assert all(r[1] == "0.67 ?" and abs(r[2] - 2 / 3) < 1e-9 for r in abstained)
    greedy = [r for r in rows.values() if not r[3]]
    assert {r[0] for r in greedy} == {"YES", "NO"} and all(r[2] in (0.0, 1.0) for r in greedy)
    assert w.store_label.text() == "store: r.sqlite" and w.store_label.toolTip() == str(store.resolve())
    assert w.vetting.store.path == store.resolve()


def _decide_here(qtbot, w, key, store: Path) -> None:
    """Show a spectrum the night screened greedily (its trace in the agent pane) and decide it: in the night store."""
    m = w.table_model
    row = next(r for r in range(m.rowCount()) if m.data(m.index(r, COL["model"])) in ("YES", "NO"))
    w.vetting.go_to(row)
    text = w.agent_panel.transcript.toPlainText()  # the night's trace, found beside its store
    assert "(stored run)" in text and "scripted" in text and ("Balmer emission" in text or "No emission" in text)
    entry = w.vetting.entry
    key(w, Qt.Key.Key_N)
    with VettingStore(store, readonly=True) as s:
        d = s.decision(entry.address, "cv")
        assert d is not None and d.decision == "NO"
        assert s.latest_model_verdict(entry.address, "cv").model_id == "scripted"


def test_store_option_of_the_entry_point(qtbot, monkeypatch, screened, key):
    """``spec-o3-desktop --store S ARCHIVE`` (the entry point, its event loop replaced by the checks)."""
    from speco3.gui import app as app_module
    from speco3.gui.main_window import MainWindow

    archive, store = screened
    monkeypatch.setattr("speco3.applog.setup_logging", lambda *a, **k: None)
    monkeypatch.setattr("speco3.applog.install_thread_hook", lambda: None)
    monkeypatch.setattr("speco3.gui.crash.install_excepthook", lambda: None)
    QApplication.instance().setProperty("speco3_no_dialogs", True)
    checked = []

    def run_checks(_app) -> int:
        w = next(x for x in QApplication.topLevelWidgets() if isinstance(x, MainWindow))
        try:
            qtbot.waitUntil(lambda: w.vetting.entry is not None, timeout=60000)
            _check_night_table(w, store)
            _decide_here(qtbot, w, key, store)
            assert AppSettings.load().archive_stores == {str(archive.resolve()): str(store.resolve())}
            checked.append(True)
        finally:
            w.close()
        return 0

    monkeypatch.setattr(QApplication, "exec", run_checks)
    assert app_module.main(["--store", str(store), str(archive)]) == 0
    assert checked


def test_open_store_menu_then_the_apps_own_and_back(qtbot, make_window, open_and_wait, screened, key, tmp_path):
    archive, store = screened
    w = make_window()
    open_and_wait(w, archive)  # the store beside it is one folder away (night/): not "beside"; the app's own
    assert w.store_label.text() == "store: the app's own"
    own = w.vetting.store.path
    assert {r[0] for r in _table(w).values()} <= {None, ""}  # nothing screened in the app's own store
    action = next(a for a in w.menuBar().actions()[0].menu().actions() if a.text() == "Open store…")
    from PySide6.QtWidgets import QFileDialog

    original = QFileDialog.getOpenFileName
    QFileDialog.getOpenFileName = staticmethod(lambda *a, **k: (str(store), ""))
    try:
        action.trigger()
    finally:
        QFileDialog.getOpenFileName = original
    qtbot.waitUntil(lambda: w.vetting.entry is not None, timeout=30000)
    _check_night_table(w, store)
    _decide_here(qtbot, w, key, store)
    with VettingStore(own, readonly=True) as s:
        assert s.decisions("cv") == []  # the app's own store got nothing
    # a store of another archive: refused with the reason, the night store kept
    foreign = tmp_path / "foreign.sqlite"
    with VettingStore(foreign) as s:
        s.set_state(ARCHIVE_ROOT_STATE, str(tmp_path / "elsewhere"))
        s.record_model_verdict(ModelVerdict(spectrum_key="/elsewhere/x.fits#0", task="cv", verdict="YES",
                                            outcome="YES"))
    assert not w.open_store(foreign)
    assert "none of them in" in w.statusBar().currentMessage() and w.vetting.store.path == store.resolve()
    # File → Use the app's own store, remembered; the night store again by its menu entry's method
    w.use_own_store()
    assert w.vetting.store.path == own and w.store_label.text() == "store: the app's own"
    assert w.settings.archive_stores == {str(archive.resolve()): ""}
    assert w.open_store(store) and w.settings.archive_stores == {str(archive.resolve()): str(store.resolve())}


def test_a_vet_store_beside_the_archive_is_used_and_remembered(qtbot, make_window, open_and_wait, screened):
    archive, store = screened
    beside = archive.parent / "r.sqlite"
    shutil.move(store, beside)  # `vet ARCHIVE --out r.sqlite` run in the folder above the archive
    try:
        _beside_is_used(qtbot, make_window, open_and_wait, archive, beside)
    finally:
        for suffix in ("", "-wal", "-shm", ".writer"):
            Path(f"{beside}{suffix}").unlink(missing_ok=True)


def _beside_is_used(qtbot, make_window, open_and_wait, archive: Path, beside: Path) -> None:
    w = make_window()
    open_and_wait(w, archive)
    assert w.vetting.store.path == beside.resolve() and w.store_label.text() == "store: r.sqlite"
    rows = _table(w)
    assert sum(r[3] for r in rows.values()) > 0 and {"YES", "NO"} <= {r[0] for r in rows.values()}
    assert w.settings.archive_stores == {str(archive.resolve()): str(beside.resolve())}
    assert "store: r.sqlite" in w.windowTitle()  # named beyond the status bar
    w.open_archive(archive)  # reopened: the remembered store, named in the title
    qtbot.waitUntil(lambda: w.index is not None and w._index_worker is None and w.vetting.entry is not None,
                    timeout=30000)
    assert w.vetting.store.path == beside.resolve() and "store: r.sqlite" in w.windowTitle()
    w.use_own_store()  # declined: not offered again when the archive is opened next
    assert "store:" not in w.windowTitle()
    w.open_archive(archive)
    qtbot.waitUntil(lambda: w.index is not None and w._index_worker is None and w.vetting.entry is not None,
                    timeout=30000)
    assert w.store_label.text() == "store: the app's own"


def test_store_option_without_a_store_or_an_archive(capsys, tmp_path):
    from speco3.gui.app import build_parser, main

    assert main(["--store", str(tmp_path / "missing.sqlite")]) == 2
    assert "missing.sqlite: no such vetting store" in capsys.readouterr().err
    assert "--store STORE" in build_parser().format_help()


def test_open_store_without_an_archive_opens_the_one_it_names(qtbot, make_window, screened):
    archive, store = screened
    w = make_window()
    assert w.archive_root is None
    assert w.open_store(store)  # the store names the archive `vet` screened
    qtbot.waitUntil(lambda: w.vetting.entry is not None, timeout=30000)
    assert w.archive_root == str(archive.resolve())
    _check_night_table(w, store)


def test_the_stores_chosen_per_archive_survive_a_hand_edited_settings_file(tmp_path):
    settings = AppSettings.from_dict({"archive_stores": {"/a": "/a/r.sqlite", "/b": "", "/c": 3}})
    assert settings.archive_stores == {"/a": "/a/r.sqlite", "/b": ""}  # a value of the wrong type is left out
    assert AppSettings.from_dict({"archive_stores": ["x"]}).archive_stores == {}
    settings.save(tmp_path / "s.json")
    assert AppSettings.load(tmp_path / "s.json").archive_stores == {"/a": "/a/r.sqlite", "/b": ""}
