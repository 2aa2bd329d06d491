"""Certified stopping in the app: after the batch pre-screen (scripted engine through the real screening path) the
decision panel shows the stopping line, which follows the pre-screen by itself; "Audit the rest" draws the audit
sample and makes it the queue, and after the audit the spectra a stop leaves unread are greyed in the table. The
test runs on the stopping worker's thread, never the GUI's, at the settings' target until a draw records its own."""

from __future__ import annotations

import shutil
import threading

import pytest
from PySide6.QtCore import Qt

from speco3.gui.archive_model import COL
from speco3.gui.dialogs import SettingsDialog
from speco3.gui.settings import AppSettings
from speco3.vetting import Decision, ModelVerdict, stopping
from speco3.vetting.stopping import assess

pytestmark = pytest.mark.gui


def _key(entry) -> str:
    return f"{entry.path}#{entry.index}"


def _refresh(qtbot, w) -> str:
    """Ask for the stopping test and wait for its answer; the line shown."""
    with qtbot.waitSignal(w.stoppingShown, timeout=30000):
        w.refresh_stopping()
    return w.decision.stopping.text()


def _audit(qtbot, w) -> int:
    """File → Audit the rest, waited for; how many spectra the queue then holds."""
    with qtbot.waitSignal(w.auditReady, timeout=30000) as blocker:
        w.audit_rest()
    return blocker.args[0]


def _prescreened(qtbot, make_window, demo_archive, open_and_wait, settings=None):
    w = make_window(settings=settings) if settings is not None else make_window()
    open_and_wait(w, demo_archive)
    w.start_batch()
    qtbot.waitUntil(lambda: w.batch_bar.value() == 20, timeout=120000)
    return w


def test_stopping_line_audit_sample_and_greyed_skippable(qtbot, make_window, demo_archive, open_and_wait,
                                                         fake_models):
    w = _prescreened(qtbot, make_window, demo_archive, open_and_wait)
    store, task = w.vetting.store, w.vetting.task_id
    assert len(store.model_verdicts(task)) == 20
    line = _refresh(qtbot, w)
    assert line.startswith("reviewed 0 of 20, 0 candidates found;")
    assert "to stop now with ≥ 90 % recall at 95 % confidence decide" in line and w.decision.stopping.isVisibleTo(w)

    # the head: 14 spectra decided YES, in the table's order
    w.table_model.fetch_all()
    for row in range(14):
        assert w.vetting.go_to(row)
        w.decide("YES")
    cert = assess(store, task, 0.9, 0.95)
    assert (cert.reviewed, cert.found, cert.remaining, cert.verdict) == (14, 14, 6, "continue")
    assert _refresh(qtbot, w) == cert.line()
    assert f"decide {cert.sample_needed} random spectra of the 6 left" in cert.line()

    # Audit the rest: the audit sample becomes the queue, in its drawn order
    n = _audit(qtbot, w)
    drawn = store.audit_frame(task)[:store.audit_draws(task)[-1]["drawn"]]
    assert n == len(drawn) == cert.sample_needed and w.table_model.is_candidate_list
    assert [_key(w.table_model.entry(r)) for r in range(n)] == drawn
    assert w.vetting.row == 0
    assert w.decision.stopping.text().startswith("reviewed 14 of 20") and f"audit sample: 0 of {n} decided" in \
        w.decision.stopping.text()
    for row in range(n):
        assert w.vetting.go_to(row)
        w.decide("NO")
    assert _audit(qtbot, w) == n  # the sample is decided and says stop: nothing more drawn
    assert len(store.audit_draws(task)) == 1
    cert = assess(store, task, 0.9, 0.95)
    assert cert.verdict == "stop" and cert.labels_used == n and cert.skippable_keys
    assert "stop: at most" in _refresh(qtbot, w)

    # back to the whole table: the unread spectra a stop leaves are greyed, the others are not
    w.table_model.set_entries(None)
    w.table_model.fetch_all()
    m = w.table_model
    greyed = {_key(m.entry(r)) for r in range(m.rowCount())
              if m.data(m.index(r, COL["name"]), Qt.ItemDataRole.ForegroundRole) is not None}
    assert greyed == set(cert.skippable_keys)


def test_spectra_not_screened_are_said_and_hold_the_stop(qtbot, make_window, demo_archive, open_and_wait,
                                                         fake_models):
    """One of the archive's 20 spectra screened and decided: the line counts the archive's unscreened spectra (the
    certificate covers screened ones only), greys nothing, and Audit the rest draws nothing until they are screened."""
    w = make_window()
    open_and_wait(w, demo_archive)
    w.table_model.fetch_all()
    store, task = w.vetting.store, w.vetting.task_id
    key = _key(w.table_model.entry(0))
    store.record_model_verdict(ModelVerdict(key, task, "YES", "YES", p_yes=1.0, rollouts=3))
    store.record_decision(Decision(key, task, "YES"))
    line = _refresh(qtbot, w)
    assert line == ("reviewed 1 of the 1 screened (likely first), 1 candidate found; 19 spectra not screened yet — "
                    "screen them (pre-screen) before a stop covers the archive")
    assert w.table_model.skippable == set()
    assert _audit(qtbot, w) == 0 and store.audit_draws(task) == []


def test_the_stopping_line_follows_the_pre_screen_by_itself(qtbot, make_window, demo_archive, open_and_wait,
                                                            fake_models):
    """Nobody asks for a refresh: the verdicts the batch records bring the line (it used to follow decisions only,
    so after a pre-screen it stayed empty until the first decision)."""
    w = _prescreened(qtbot, make_window, demo_archive, open_and_wait)
    qtbot.waitUntil(lambda: w.decision.stopping.text().startswith("reviewed 0 of 20, 0 candidates"), timeout=30000)
    assert w.decision.stopping.isVisibleTo(w)


def test_the_test_runs_on_the_worker_and_its_answer_is_applied_when_it_comes(qtbot, make_window, demo_archive,
                                                                             open_and_wait, fake_models, monkeypatch):
    threads: list[str] = []
    real_current, real_audit = stopping.current, stopping.audit_rest

    def current(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_current(*args, **kwargs)

    def audit_rest(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_audit(*args, **kwargs)

    monkeypatch.setattr(stopping, "current", current)
    monkeypatch.setattr(stopping, "audit_rest", audit_rest)
    w = _prescreened(qtbot, make_window, demo_archive, open_and_wait)
    w.decision.show_stopping("")
    w.refresh_stopping()
    assert w.decision.stopping.text() == ""  # not computed here: the answer comes through the event loop
    qtbot.waitUntil(lambda: w.decision.stopping.text().startswith("reviewed 0 of 20"), timeout=30000)
    assert _audit(qtbot, w) > 0
    assert threads and set(threads) == {"speco3-stopping"}


def test_the_target_comes_from_the_settings_until_a_draw_records_one(qtbot, make_window, demo_archive,
                                                                      open_and_wait, fake_models):
    settings = AppSettings()
    w = _prescreened(qtbot, make_window, demo_archive, open_and_wait, settings=settings)
    dlg = SettingsDialog(settings)
    qtbot.addWidget(dlg)
    assert (dlg.stop_recall.value(), dlg.stop_confidence.value()) == (90.0, 95.0)
    dlg.stop_recall.setValue(80.0)
    dlg.stop_confidence.setValue(90.0)
    dlg.accept()
    assert (settings.stop_recall, settings.stop_confidence) == (0.8, 0.9)
    store, task = w.vetting.store, w.vetting.task_id
    want = assess(store, task, 0.8, 0.9)
    line = _refresh(qtbot, w)
    assert line == want.line() and "to stop now with ≥ 80 % recall at 90 % confidence decide" in line
    assert _audit(qtbot, w) == want.sample_needed  # drawn at the settings' target, recorded with the draw
    assert [(d["recall"], d["confidence"]) for d in store.audit_draws(task)] == [(0.8, 0.9)]
    settings.stop_recall, settings.stop_confidence = 0.95, 0.99  # the draw keeps its own
    assert "≥ 80 % recall at 90 % confidence" in _refresh(qtbot, w)


def test_stopping_settings_are_kept_and_bad_values_ignored(tmp_path):
    s = AppSettings()
    assert (s.stop_recall, s.stop_confidence) == (stopping.DEFAULT_RECALL, stopping.DEFAULT_CONFIDENCE)
    s.stop_recall, s.stop_confidence = 0.975, 0.99
    s.save(tmp_path / "d.json")
    again = AppSettings.load(tmp_path / "d.json")
    assert (again.stop_recall, again.stop_confidence) == (0.975, 0.99)
    for bad in ({"stop_recall": 0}, {"stop_recall": 1.5}, {"stop_confidence": 1.0}, {"stop_confidence": True},
                {"stop_recall": "0.9"}, {"stop_confidence": float("nan")}):
        s = AppSettings.from_dict(bad)
        assert (s.stop_recall, s.stop_confidence) == (0.9, 0.95), bad
    assert AppSettings.from_dict({"stop_recall": 1, "stop_confidence": 0.5}).stop_recall == 1


def test_the_worker_answers_in_order_keeps_every_audit_and_says_why_it_cannot(qtbot, tmp_path):
    from speco3.gui.workers import StoppingJob, StoppingWorker
    from speco3.vetting import Decision, ModelVerdict, VettingStore

    store = VettingStore(tmp_path / "s.sqlite")
    for i in range(60):
        p = 1.0 if i < 6 else 0.0
        store.record_model_verdict(ModelVerdict(f"s{i:02d}", "cv", "YES" if p else "NO", "YES" if p else "NO",
                                                p_yes=p, rollouts=3))
    for i in range(6):
        store.record_decision(Decision(f"s{i:02d}", "cv", "YES"))
    worker = StoppingWorker()
    answers: list[tuple[int, object, str]] = []
    worker.done.connect(lambda i, cert, error: answers.append((i, cert, error)))
    try:
        for i in range(1, 6):
            worker.submit(StoppingJob(i, store, "cv", 0.9, 0.95))
        worker.submit(StoppingJob(6, store, "cv", 0.9, 0.95, audit=True, vetter="me"))
        worker.submit(StoppingJob(7, store, "cv", 0.9, 0.95))
        qtbot.waitUntil(lambda: bool(answers) and answers[-1][0] == 7, timeout=30000)
        ids = [i for i, _c, _e in answers]
        assert ids == sorted(ids) and 6 in ids and not any(e for _i, _c, e in answers)
        by_id = {i: c for i, c, _e in answers}
        assert by_id[6].sample_drawn == by_id[7].sample_drawn > 0  # the audit drew; the refresh after it sees it
        assert store.audit_draws("cv")[0]["vetter"] == "me"
        gone = VettingStore(tmp_path / "gone.sqlite")
        gone.close()
        (tmp_path / "gone.sqlite").unlink()
        worker.submit(StoppingJob(8, gone, "cv", 0.9, 0.95))
        qtbot.waitUntil(lambda: answers[-1][0] == 8, timeout=30000)
        assert answers[-1][1] is None and "closed database" in answers[-1][2]  # said, not raised
    finally:
        worker.stop()
        worker.deleteLater()
        store.close()


def test_after_a_full_pre_screen_a_sky_fibre_is_not_counted_as_unscreened(qtbot, make_window, spectra_dir, tmp_path,
                                                                          open_and_wait, fake_models):
    """The line counts the spectra a screening takes (`archive_keys`: sky fibres and fully masked spectra left out,
    unreadable ones in), as `spec-o3 triage` does; counting every readable entry kept a DESI coadd's sky fibre
    "not screened" after the whole queue was pre-screened."""
    folder = tmp_path / "night"
    folder.mkdir()
    for rel in ("desi/coadd-sv3-dark-26065.fits", "generic/gbt_1d.fits"):
        shutil.copy(spectra_dir / rel, folder)
    w = make_window()
    open_and_wait(w, folder)
    w.table_model.fetch_all()
    n = w.table_model.loaded_rows()
    assert w.index.count(usable=False) >= 1  # the sky fibre is there
    w.start_batch()
    qtbot.waitUntil(lambda: w.batch_bar.value() == n, timeout=120000)
    qtbot.waitUntil(lambda: w.decision.stopping.text().startswith(f"reviewed 0 of {n}"), timeout=30000)
    assert "not screened" not in _refresh(qtbot, w)
