"""Certified stopping in the app: after the batch pre-screen (scripted engine through the real screening path) the
decision panel shows the stopping line, "Audit the rest" draws the random spectra and makes them the queue, and after
the audit the spectra a stop leaves unread are greyed in the table."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from speco3.gui.archive_model import COL
from speco3.vetting.stopping import assess

pytestmark = pytest.mark.gui


def _key(entry) -> str:
    return f"{entry.path}#{entry.index}"


def test_stopping_line_audit_draw_and_greyed_skippable(qtbot, make_window, demo_archive, open_and_wait, fake_models):
    w = make_window()
    open_and_wait(w, demo_archive)
    w.start_batch()
    qtbot.waitUntil(lambda: w.batch_bar.value() == 20, timeout=120000)
    store, task = w.vetting.store, w.vetting.task_id
    assert len(store.model_verdicts(task)) == 20
    w.refresh_stopping()
    assert w.decision.stopping.text().startswith("reviewed 0 of 20 (likely first), 0 candidates found")
    assert "decide" in w.decision.stopping.text() and w.decision.stopping.isVisibleTo(w)

    # the head: 14 spectra decided YES, in the table's order
    w.table_model.fetch_all()
    for row in range(14):
        assert w.vetting.go_to(row)
        w.decide("YES")
    cert = assess(store, task, 0.9, 0.95)
    assert (cert.reviewed, cert.found, cert.remaining, cert.verdict) == (14, 14, 6, "continue")
    w.refresh_stopping()
    assert w.decision.stopping.text() == cert.line()
    assert f"decide {cert.sample_needed} random spectra of the 6 left" in cert.line()

    # Audit the rest: the drawn spectra become the queue, in draw order
    n = w.audit_rest()
    drawn = store.audit_frame(task)[:store.audit_draws(task)[-1]["drawn"]]
    assert n == len(drawn) == cert.sample_needed and w.table_model.is_candidate_list
    assert [_key(w.table_model.entry(r)) for r in range(n)] == drawn
    assert w.vetting.row == 0
    for row in range(n):
        assert w.vetting.go_to(row)
        w.decide("NO")
    assert w.audit_rest() == n  # the draw is done and says stop: nothing more drawn
    assert len(store.audit_draws(task)) == 1
    w.refresh_stopping()
    cert = assess(store, task, 0.9, 0.95)
    assert cert.verdict == "stop" and cert.labels_used == n and cert.skippable_keys
    assert "stop: at most" in w.decision.stopping.text()

    # back to the whole table: the unread spectra a stop leaves are greyed, the others are not
    w.table_model.set_entries(None)
    w.table_model.fetch_all()
    m = w.table_model
    greyed = {_key(m.entry(r)) for r in range(m.rowCount())
              if m.data(m.index(r, COL["name"]), Qt.ItemDataRole.ForegroundRole) is not None}
    assert greyed == set(cert.skippable_keys)
