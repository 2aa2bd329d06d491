"""Keyboard-only vetting of a whole archive, resume after reopening, prefetch, batch pre-screen."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt

from speco3.engine.choice import InstalledModel
from speco3.gui.archive_model import COL
from speco3.gui.settings import AppSettings
from speco3.vetting import VettingStore

pytestmark = pytest.mark.gui

CYCLE = [Qt.Key.Key_Y, Qt.Key.Key_N, Qt.Key.Key_U]
EXPECT = ["YES", "NO", "UNSURE"]


def test_keyboard_vetting_of_20_spectra_and_resume(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    store_path = w.vetting.store.path
    for i in range(12):
        key(w, CYCLE[i % 3])
    assert w.vetting.row == 12
    stopped_at = w.vetting.entry.key
    w.close()  # everything was written at once: a fresh reader sees all 12
    with VettingStore(store_path, readonly=True) as store:
        assert len(store.decisions("cv")) == 12
    # reopen: the app reopens the last archive and resumes where the vetter stopped
    w2 = make_window(settings=AppSettings.load())
    assert w2.settings.last_archive == str(demo_archive.resolve())
    open_and_wait(w2, w2.settings.last_archive)
    assert w2.vetting.entry.key == stopped_at and w2.vetting.row == 12
    assert w2.decision.position.text().startswith("Spectrum 13 of 20 · 12 decided")
    for i in range(12, 20):
        key(w2, CYCLE[i % 3])
    key(w2, Qt.Key.Key_Y)  # at the end of the queue: re-decides the last one, adds no row
    decisions = w2.vetting.store.decisions("cv")
    assert len(decisions) == 20
    assert len({d.spectrum_key for d in decisions}) == 20
    by_key = {d.spectrum_key: d.decision for d in decisions}
    rows = [w2.table_model.entry(r) for r in range(20)]
    got = [by_key[f"{e.path}#{e.index}"] for e in rows]
    assert got[:19] == [EXPECT[i % 3] for i in range(19)] and got[19] == "YES"
    assert "end of the queue" in w2.statusBar().currentMessage()


def test_next_and_previous_use_prefetched_spectra(qtbot, make_window, demo_archive, open_and_wait, key):
    w = make_window()
    open_and_wait(w, demo_archive)
    cache = w.vetting.cache
    cache.wait_idle()
    assert cache.cached(w.table_model.entry(1).key) and cache.cached(w.table_model.entry(3).key)
    misses = cache.misses
    for _ in range(5):
        key(w, Qt.Key.Key_Right)
        cache.wait_idle()
    key(w, Qt.Key.Key_Left)
    assert w.vetting.row == 4
    assert cache.misses == misses  # every switch came from the prefetch cache
    key(w, Qt.Key.Key_Right, Qt.KeyboardModifier.ShiftModifier)  # next undecided
    assert w.vetting.row == 5


def test_batch_prescreen_fills_the_table_while_the_vetter_works(qtbot, make_window, demo_archive, open_and_wait,
                                                               key, engine_factory, fake_models):
    engine_factory.delay_s = 0.001
    w = make_window()
    open_and_wait(w, demo_archive)
    w.start_batch()
    assert w.batch_bar.isVisible()
    key(w, Qt.Key.Key_N)  # the vetter keeps working
    w.toggle_batch_pause()
    paused_at = w.batch_bar.value()
    qtbot.wait(600)
    assert w.batch_bar.value() <= paused_at + 1  # at most the item in flight finishes
    w.toggle_batch_pause()
    qtbot.waitUntil(lambda: w.batch_bar.value() == 20, timeout=60000)
    store = w.vetting.store
    verdicts = store.model_verdicts("cv")
    assert len(verdicts) == 20 and {v.verdict for v in verdicts} == {"YES"}
    assert w.table_model.data(w.table_model.index(10, COL["model"])) == "YES"
    assert len(store.decisions("cv")) == 1
    # sort by model verdict, filter by verdict state
    w.table_model.sort(COL["model"], Qt.SortOrder.AscendingOrder)
    assert w.table_model.loaded_rows() == 20
    w.archive.state.setCurrentText("model YES")
    assert w.table_model.loaded_rows() == 20
    w.archive.state.setCurrentText("undecided")
    assert w.table_model.loaded_rows() == 19


def test_batch_cancel(qtbot, make_window, demo_archive, open_and_wait, engine_factory, fake_models):
    engine_factory.delay_s = 0.02
    w = make_window()
    open_and_wait(w, demo_archive)
    w.start_batch()
    qtbot.waitUntil(lambda: w.batch_bar.value() >= 1, timeout=30000)
    w.inference.cancel_batch()
    qtbot.waitUntil(lambda: not w.inference.batch_running(), timeout=30000)
    n = len(w.vetting.store.model_verdicts("cv"))
    assert 1 <= n < 20


def test_keyboard_vetting_of_the_shared_real_spectra(qtbot, make_window, spectra_dir, open_and_wait, key):
    """Every shared survey file (LAMOST, SDSS, DESI, generic, odd ones) can be walked and decided by keyboard."""
    w = make_window()
    open_and_wait(w, spectra_dir, timeout=120000)
    w.table_model.fetch_all()
    n = w.table_model.loaded_rows()
    assert n > 40
    shown = unreadable = 0
    for row in range(n):
        assert w.vetting.row == row
        if w.vetting.spectrum is not None:
            shown += 1
            assert w.viewer._x.size == w.vetting.spectrum.n_pixels
            lo, hi = w.viewer.y_range()
            assert np.isfinite(lo) and np.isfinite(hi) and hi > lo
            key(w, Qt.Key.Key_U)  # decide and advance
        else:
            unreadable += 1
            key(w, Qt.Key.Key_U)  # refused: nothing readable is shown (issue 41), and no advance
            assert w.vetting.row == row and "not readable" in w.statusBar().currentMessage()
            key(w, Qt.Key.Key_Right)
    decisions = w.vetting.store.decisions("cv")
    assert len(decisions) == shown
    assert shown >= 40


def test_prescreen_uses_the_vet_rule_prompt_version_and_changed_files(qtbot, make_window, demo_archive, open_and_wait,
                                                                      engine_factory, fake_models):
    """What the pre-screen counts as done is `spec-o3 vet`'s rule (`DoneCheck`): a run with another prompt version
    or on a file whose content changed since is done again; a run on the same file with the same prompt is not."""
    import dataclasses
    import os

    from astropy.io import fits

    from speco3.vetting.screening import DoneCheck

    engine_factory.delay_s = 0.001
    w = make_window()
    open_and_wait(w, demo_archive)
    w.table_model.fetch_all()
    entries = [w.table_model.entry(r) for r in range(w.table_model.loaded_rows())]
    assert w.agent.start_batch(entries, "cv", InstalledModel("test-model")) == 20
    store = w.vetting.store
    qtbot.waitUntil(lambda: len(store.model_verdicts("cv")) == 20, timeout=60000)
    assert all(v.file_sha256 for v in store.model_verdicts("cv"))  # recorded as vet records it
    assert w.agent.start_batch(entries, "cv", InstalledModel("test-model")) == 0  # all done
    # the same rule, asked directly: every entry is done for vet too
    check = DoneCheck(store, w.agent.tasks["cv"], "test-model")
    assert {check.state(f"{e.path}#{e.index}", e.path) for e in entries} == {"done"}

    path = entries[3].path  # new content: that spectrum only is screened again
    with fits.open(path) as hdul:  # a header card added: still a good file, other bytes
        hdul[0].header["HISTORY"] = "re-reduced"
        hdul.writeto(str(path) + ".new.fits.gz")
    os.replace(str(path) + ".new.fits.gz", path)
    assert w.agent.start_batch(entries, "cv", InstalledModel("test-model")) == 1
    qtbot.waitUntil(lambda: len(store.model_verdicts("cv", latest=False)) == 21, timeout=60000)
    assert w.agent.start_batch(entries, "cv", InstalledModel("test-model")) == 0

    cv = w.agent.tasks["cv"]  # a changed prompt (another task text): everything is screened again
    w.agent.tasks["cv"] = dataclasses.replace(cv, question=cv.question + " Answer carefully.")
    assert w.agent.tasks["cv"].prompt_version != cv.prompt_version
    assert w.agent.start_batch(entries, "cv", InstalledModel("test-model")) == 20
    w.inference.cancel_batch()
    qtbot.waitUntil(lambda: not w.inference.batch_running(), timeout=60000)


def test_a_state_filtered_table_follows_the_verdicts_of_a_running_batch(qtbot, make_window, demo_archive,
                                                                        open_and_wait, key, engine_factory,
                                                                        fake_models):
    """The trial saw "model abstained" list 12 of 19 finished: the filter ran once, at the click."""
    engine_factory.delay_s = 0.001
    w = make_window()
    open_and_wait(w, demo_archive)
    w.start_batch()
    qtbot.waitUntil(lambda: w.batch_bar.value() >= 2, timeout=30000)
    w.toggle_batch_pause()
    w.archive.state.setCurrentText("model YES")
    assert w.table_model.loaded_rows() < 20
    key(w, Qt.Key.Key_Right)
    shown = w.vetting.entry.key
    w.toggle_batch_pause()
    qtbot.waitUntil(lambda: w.batch_bar.value() == 20, timeout=60000)
    qtbot.waitUntil(lambda: w.table_model.loaded_rows() == 20, timeout=5000)  # no click needed
    assert w.vetting.entry.key == shown  # the vetter's spectrum stayed; its row is highlighted where it now is
    assert w.table_model.entry(w.vetting.row).key == shown
    assert w.archive.table.currentIndex().row() == w.vetting.row
    key(w, Qt.Key.Key_Y)  # and the decision goes to it
    assert w.vetting.store.decision(f"{w.table_model.entry(w.vetting.row - 1).path}#0", "cv") is not None
