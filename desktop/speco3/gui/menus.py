"""The main window's menu bar: every action calls a public method of the window or of its parts."""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMessageBox

from speco3 import __version__
from speco3.gui.crash import open_log_folder
from speco3.vetting.export_formats import FORMATS


def add_action(window, menu, text: str, slot, shortcut: str | None = None) -> QAction:
    """An action owned by ``window`` (Qt deletes it with the window), added to ``menu``."""
    act = QAction(text, window)
    if shortcut:
        act.setShortcut(QKeySequence(shortcut))
    act.triggered.connect(slot)
    menu.addAction(act)
    return act


@dataclass
class MenuActions:
    """The menu entries that need something open, by what they need; the window enables them as the session allows
    (`MainWindow._show_enabled`), so an entry that cannot do anything is greyed rather than answering afterwards
    (Export asked for a file name on the start screen, then said "open an archive first")."""

    archive: list[QAction] = field(default_factory=list)  # an indexed archive (candidate lists, the app's store)
    store: list[QAction] = field(default_factory=list)  # an open store, read-only or not (exports)
    writable: list[QAction] = field(default_factory=list)  # a store this window writes (audit, pre-screen)
    spectrum: list[QAction] = field(default_factory=list)  # a readable spectrum shown, writable (run the agent)
    run: list[QAction] = field(default_factory=list)  # an agent run going (cancel it)
    batch: list[QAction] = field(default_factory=list)  # a batch pre-screen going, paused or not (pause, cancel)


def build_menus(w) -> MenuActions:
    """File, Export, Agent, Tasks, Models, Settings and Help menus of the main window ``w``; returns the entries
    that need an archive, a store, a spectrum, a run or a batch."""
    need = MenuActions()
    mb = w.menuBar()
    f = mb.addMenu("&File")
    add_action(w, f, "Open archive folder…", w.choose_archive, "Ctrl+O")
    add_action(w, f, "Open the demo archive", w.open_demo)
    add_action(w, f, "Open store…", w.choose_store)
    need.archive.append(add_action(w, f, "Use the app's own store", w.use_own_store))
    f.addSeparator()
    need.archive.append(add_action(w, f, "Load candidate list (CSV, FITS, VOTable)…", w.choose_candidates))
    need.archive.append(add_action(w, f, "Use the filtered table as the queue", w.use_table_queue))
    need.writable.append(add_action(w, f, "Audit the rest (audit sample: may I stop?)", w.audit_rest))
    f.addSeparator()
    add_action(w, f, "Quit", w.close, "Ctrl+Q")
    e = mb.addMenu("&Export")
    for fmt in FORMATS.values():  # one entry per registered format
        need.store.append(add_action(w, e, f"{fmt.title}…", lambda _c=False, name=fmt.name: w.choose_export(name)))
    a = mb.addMenu("&Agent")
    need.spectrum.append(add_action(w, a, "Run on this spectrum (A)", w.run_agent))
    need.run.append(add_action(w, a, "Cancel run (Esc)", w.agent.cancel))
    a.addSeparator()
    need.writable.append(add_action(w, a, "Batch pre-screen the queue", w.start_batch))
    need.batch.append(add_action(w, a, "Pause / resume batch", w.toggle_batch_pause))
    need.batch.append(add_action(w, a, "Cancel batch", w.inference.cancel_batch))
    t = mb.addMenu("&Tasks")
    add_action(w, t, "New task…", w.new_task)
    add_action(w, t, "Edit task…", w.edit_task)
    m = mb.addMenu("&Models")
    add_action(w, m, "Model manager…", w.open_model_manager)
    s = mb.addMenu("&Settings")
    add_action(w, s, "Settings…", w.open_settings)
    h = mb.addMenu("&Help")
    add_action(w, h, "Keyboard cheat sheet (H)", w.decision.toggle_cheat_sheet)
    add_action(w, h, "Open log folder", open_log_folder)
    add_action(w, h, "About", lambda: QMessageBox.about(w, "Spec-o3 Desktop", f"Spec-o3 Desktop {__version__}"))
    return need
