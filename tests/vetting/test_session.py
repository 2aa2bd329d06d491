"""The Qt-free vetting session (`speco3.vetting.session`): every write lands on a readable spectrum of the archive
shown, in its store; nothing shown, an unreadable file, another archive, task or queue refuse or follow; the
arrangement and position come back after a restart and after ``kill -9``; one writer per store; a read-only data
folder keeps the store in memory until it moves; writes of other processes are noticed; outcomes and labels."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from speco3.demo import write_demo_archive
from speco3.engine.choice import SCRIPTED_LABEL
from speco3.errors import StoreError
from speco3.spectra import ArchiveIndex
from speco3.vetting import VettingStore
from speco3.vetting.records import Decision, Evidence, ModelVerdict, spectrum_key
from speco3.vetting.session import (
    POSITION_STATE,
    SESSION_STATE,
    ListQueue,
    SessionView,
    VettingSession,
    store_key,
)
from speco3.vetting.writer_lock import WriterLock
from speco3_testkit.readonly import read_only_folder


@dataclass
class Settings:
    auto_advance: bool = True

    def vetter_name(self) -> str:
        return "Ana"


def _entries(folder: Path, tmp_path: Path) -> list:
    ix = ArchiveIndex(tmp_path / f"{folder.name}-index.sqlite")
    ix.scan(folder, workers=1)
    entries = list(ix.query(limit=1000))
    ix.close()
    return entries


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, list]:
    tmp = tmp_path_factory.mktemp("session")
    folder = write_demo_archive(tmp / "demo")[0].parent
    (folder / "aaa-notes.fits").write_text("observing notes, not a FITS file\n")
    return folder, _entries(folder, tmp)


def _load(entry):
    return entry.load()


def _session(demo, tmp_path, settings=None, name="store.sqlite") -> tuple[VettingSession, list]:
    folder, entries = demo
    s = VettingSession(settings or Settings(), _load)
    messages: list[str] = []
    s.message.connect(messages.append)
    s.error.connect(messages.append)
    assert s.open_archive(folder, tmp_path / name).opened
    s.set_queue(ListQueue(entries))
    return s, messages


def _readable_row(entries) -> int:
    return next(i for i, e in enumerate(entries) if e.file_name != "aaa-notes.fits")


def _every_write(s: VettingSession) -> list[bool]:
    return [s.decide("YES", [], "", []), s.save_notes(["interesting"], "c", [Evidence(4800, 4900, "Hb")])]


def test_nothing_shown_refuses_every_write(demo, tmp_path):
    s, messages = _session(demo, tmp_path)
    assert s.shown is None and s.refusal() == "no spectrum shown (the table is empty): nothing decided"
    assert _every_write(s) == [False, False]
    s.update_notes(["interesting"], "c", [])
    assert s.store is not None and s.decided_count() == 0 and s.store.annotations() == []
    assert s.model_suggestion() is None and s.current_record() == (None, None) and s.model_windows() == []
    assert "nothing decided" in messages[-1]
    bare = VettingSession(Settings(), _load)  # no archive open at all
    assert bare.refusal() == "open an archive first: nothing decided" and not bare.decide("NO", [], "", [])
    assert bare.store_refusal() == "open an archive first" and not bare.step(1) and not bare.resume()


def test_an_unreadable_file_is_shown_with_its_reason_and_takes_nothing(demo, tmp_path):
    s, messages = _session(demo, tmp_path)
    row = next(i for i, e in enumerate(demo[1]) if e.file_name == "aaa-notes.fits")
    assert s.go_to(row)
    assert s.shown is not None and s.spectrum is None and s.shown.error
    assert "aaa-notes.fits: not readable" in (s.refusal() or "")
    assert _every_write(s) == [False, False]
    assert s.row == row and s.decided_count() == 0  # refused: no auto-advance either
    assert "not readable" in messages[-1]
    assert s.step(1) and s.spectrum is not None and s.decide("NO", [], "", [])
    assert s.decided_count() == 1


def test_a_decision_lands_on_the_spectrum_shown_and_advances(demo, tmp_path):
    s, _ = _session(demo, tmp_path)
    row = _readable_row(demo[1])
    s.go_to(row)
    shown = s.shown
    assert shown is not None and shown.spectrum is not None and s.refusal() is None
    # one address, however it is asked for: the index entry's, the loaded spectrum's, the store key
    assert shown.key == shown.entry.address == spectrum_key(shown.spectrum) == f"{shown.entry.path}#{shown.entry.index}"
    stored: list[str] = []
    s.stored.connect(stored.append)
    assert s.decide("YES", ["interesting"], "He II", [Evidence(4650, 4720, "He II")])
    assert stored == [shown.entry.key] and s.row == row + 1
    dec = s.store.decision(store_key(shown.entry), "cv")
    assert dec.decision == "YES" and dec.vetter == "Ana" and dec.comment == "He II"
    s.step(-1)
    s.update_notes(["interesting"], "He II, strong", [])  # a decided spectrum's decision is stored again
    assert s.store.decision(store_key(shown.entry), "cv").comment == "He II, strong" and s.row == row


def test_another_archive_shows_nothing_and_the_old_store_is_untouched(demo, tmp_path):
    s, _ = _session(demo, tmp_path)
    s.go_to(_readable_row(demo[1]))
    old_key, old_store = s.shown.key, s.store.path
    seen: list = []
    s.current_changed.connect(seen.append)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert s.open_archive(empty, tmp_path / "empty.sqlite").opened
    s.set_queue(ListQueue([]))
    assert seen == [None] and s.shown is None and s.entry is None and s.spectrum is None
    assert _every_write(s) == [False, False] and not s.step(1) and not s.next_undecided()
    assert s.store.path != old_store and s.decided_count() == 0
    with VettingStore(old_store, readonly=True) as store:
        assert store.decision(old_key, "cv") is None


def test_a_task_switch_counts_and_decides_for_the_new_task(demo, tmp_path):
    s, _ = _session(demo, tmp_path, Settings(auto_advance=False))
    s.go_to(_readable_row(demo[1]))
    s.decide("YES", [], "", [])
    records: list[str] = []
    s.record_changed.connect(lambda: records.append(s.task_id))
    s.set_task("wd")
    assert records == ["wd"] and s.decided_count() == 0 and s.current_record() == (None, None)
    s.clear()
    told = len(records)
    s.set_task("cv")  # nothing shown: no record to show again
    assert len(records) == told and s.decided_count() == 1
    s.set_task("wd")
    s.go_to(_readable_row(demo[1]))
    s.decide("NO", [], "", [])
    assert s.store.decision(s.shown.key, "wd").decision == "NO" and s.store.decision(s.shown.key, "cv").decision == "YES"


def test_a_requery_keeps_the_spectrum_shown_or_steps_on_from_its_followers(demo, tmp_path):
    s, _ = _session(demo, tmp_path)
    entries = [e for e in demo[1] if e.file_name != "aaa-notes.fits"]
    s.set_queue(ListQueue(entries))
    s.go_to(4)
    shown = s.shown.entry
    moved: list[int] = []
    s.row_moved.connect(moved.append)
    s.before_requery()
    s.queue = ListQueue(entries[2:])  # a filter dropped the first two rows
    assert s.after_requery() and moved == [2] and s.entry is shown
    s.decide("YES", [], "", [])  # the decision goes to the spectrum shown, the step to the row after it
    assert s.store.decision(store_key(shown), "cv") is not None and s.entry is entries[5]
    s.before_requery()
    s.queue = ListQueue([e for e in entries if e is not entries[5]])  # "undecided" dropped the one shown
    assert not s.after_requery() and s.entry is entries[5]
    assert s.step(1) and s.entry is entries[6]  # → goes on to what followed it
    s.before_requery()
    s.set_queue(ListQueue(entries[10:12]))  # a candidate list
    assert not s.after_requery()
    assert s.step(1) and s.entry is entries[10] and s.decide("NO", [], "", [])
    assert s.store.decision(store_key(entries[10]), "cv").decision == "NO"


def test_a_restart_brings_back_the_arrangement_and_the_position(demo, tmp_path):
    s, _ = _session(demo, tmp_path)
    s.remember(order="uncertainty", filters={"state": "undecided"}, candidates="/lists/cands.vot")
    s.go_to(7)
    s.save_position()
    key = s.entry.key
    s.close()
    assert s.store is None and s.shown is None
    again, _ = _session(demo, tmp_path)
    assert again.view == SessionView("uncertainty", {"state": "undecided"}, "/lists/cands.vot")
    assert again.resume() and again.entry.key == key and again.row == 7
    again.store.set_state(SESSION_STATE, ["not", "a", "view"])  # a damaged state reads as the default
    again.close()
    third, _ = _session(demo, tmp_path)
    assert third.view == SessionView()


def test_after_a_kill_the_session_and_its_decisions_come_back(demo, tmp_path):
    """A process vets, then is killed with SIGKILL mid-session: the next one finds its decisions, arrangement and
    position, and takes the store (the dead process's writer lock went with it)."""
    folder, entries = demo
    store_path = tmp_path / "killed.sqlite"
    row = _readable_row(entries)
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from speco3.spectra import ArchiveIndex
        from speco3.vetting.session import ListQueue, VettingSession

        class Settings:
            auto_advance = True
            def vetter_name(self):
                return "Bo"

        ix = ArchiveIndex(Path({str(tmp_path / "child-index.sqlite")!r}))
        ix.scan(Path({str(folder)!r}), workers=1)
        s = VettingSession(Settings(), lambda e: e.load())
        assert s.open_archive(Path({str(folder)!r}), Path({str(store_path)!r})).opened
        s.set_queue(ListQueue(list(ix.query(limit=1000))))
        s.set_task("wd")
        s.remember(order="p_yes", filters={{"state": "undecided"}}, candidates="/lists/c.csv")
        s.go_to({row})
        s.decide("YES", ["interesting"], "killed after this", [])
        s.save_position()
        print(s.entry.key, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        assert proc.stdout is not None
        position = proc.stdout.readline().strip()
        assert position
        s = VettingSession(Settings(), _load)
        assert not s.open_archive(folder, store_path, browse_read_only=lambda holder: False).opened  # still alive: held
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    s = VettingSession(Settings(), _load)
    assert s.open_archive(folder, store_path).opened and s.read_only is None
    s.set_queue(ListQueue(entries))
    assert s.view == SessionView("p_yes", {"state": "undecided"}, "/lists/c.csv")
    dec = s.store.decision(store_key(entries[row]), "wd")
    assert dec.decision == "YES" and dec.vetter == "Bo" and dec.comment == "killed after this"
    assert s.store.get_state(POSITION_STATE) == position
    assert s.resume() and s.entry.key == position


def test_a_second_writer_is_told_and_browses_read_only(demo, tmp_path):
    first, _ = _session(demo, tmp_path)
    first.go_to(_readable_row(demo[1]))
    first.decide("YES", [], "", [])
    told = []
    second = VettingSession(Settings(), _load)
    assert second.open_archive(demo[0], tmp_path / "store.sqlite", lambda holder: told.append(holder) or True).opened
    assert [h.pid for h in told] == [os.getpid()] and second.store.readonly
    second.set_queue(ListQueue(demo[1]))
    assert second.go_to(_readable_row(demo[1])) and second.spectrum is not None  # browsing works
    reason = second.refusal()
    assert reason is not None and reason.startswith("read-only") and f"process {os.getpid()}" in reason
    assert _every_write(second) == [False, False] and second.store_refusal() is not None
    second.remember(order="p_yes")  # nothing written by a reader
    second.save_position()
    assert second.decided_count() == 1
    second.close()
    first.close()  # the writer goes: the store is free
    third, _ = _session(demo, tmp_path)
    assert third.read_only is None and not third.store.readonly


def test_the_writer_lock_names_its_holder_and_is_taken_again_after_release(tmp_path):
    a, b = WriterLock(tmp_path / "s.sqlite"), WriterLock(tmp_path / "s.sqlite")
    assert a.acquire() is None and a.held
    holder = b.acquire()
    assert holder is not None and holder.pid == os.getpid() and not b.held
    assert f"process {os.getpid()}" in holder.describe()
    a.release()
    assert b.acquire() is None
    b.release()
    (tmp_path / "s.sqlite.writer").write_bytes(b"\xff garbage")  # a damaged lock file names nobody, locks nothing
    assert a.acquire() is None
    a.release()


def test_a_read_only_data_folder_keeps_the_store_in_memory_until_it_moves(demo, tmp_path):
    folder, entries = demo
    ro = tmp_path / "ro-data"
    with read_only_folder(ro):
        s = VettingSession(Settings(), _load)
        opened = s.open_archive(folder, ro / "vetting" / "store.sqlite")
        assert opened.opened and opened.unsaved is not None and str(ro) in opened.unsaved
        assert s.unsaved == opened.unsaved and s.store is not None and s.store.is_in_memory and s.read_only is None
        s.set_queue(ListQueue(entries))
        row = _readable_row(entries)
        assert s.go_to(row) and s.decide("YES", [], "", [], advance=False)  # vetting goes on, in memory
        assert not any(ro.iterdir())  # nothing written there, the lock file included
        # a store with decisions already where the memory would go: refused, the memory stays
        taken = tmp_path / "taken.sqlite"
        with VettingStore(taken) as other:
            other.record_decision(Decision(spectrum_key="elsewhere#0", task="cv", decision="NO", vetter="Bo"))
        with pytest.raises(StoreError, match="exists there already"):
            s.move_store(taken)
        assert s.store.is_in_memory and s.decided_count() == 1
        target = tmp_path / "data" / "store.sqlite"
        moved = s.move_store(target)
        assert moved.opened and moved.unsaved is None and s.unsaved is None and s.store.path == target
        assert s.row == row and s.spectrum is not None and s.refusal() is None  # the same spectrum, writable
        assert s.decide("NO", [], "", [])  # a new decision replaces the old for this spectrum
        s.close()
    with VettingStore(target, readonly=True) as store:
        assert [d.decision for d in store.decisions("cv")] == ["NO"]
        assert [d.decision for d in store.decision_history(store_key(entries[row]), "cv")] == ["YES", "NO"]


def test_writes_of_another_process_are_noticed_and_own_writes_are_not(demo, tmp_path):
    s, _ = _session(demo, tmp_path)
    s.go_to(_readable_row(demo[1]))
    assert not s.follow_store()
    assert s.decide("YES", [], "", [], advance=False) and not s.follow_store()  # this session's own write
    with VettingStore(tmp_path / "store.sqlite") as other:  # another connection: `spec-o3 decide`, a `vet` run
        other.record_decision(Decision(spectrum_key=s.shown.key, task="cv", decision="NO", vetter="Bo"))
    assert s.follow_store() and not s.follow_store()  # once per change
    assert s.state_of(s.shown.entry) == (None, "NO")
    s.close()
    assert not s.follow_store()


def test_the_table_shows_what_a_run_came_to_and_demo_answers_as_demo(demo, tmp_path):
    s, _ = _session(demo, tmp_path)
    a, b = [e for e in demo[1] if e.file_name != "aaa-notes.fits"][:2]
    s.store.record_model_verdict(ModelVerdict(spectrum_key=store_key(a), task="cv", model_id="m", verdict=None,
                                              outcome="no_answer"))
    s.store.record_model_verdict(ModelVerdict(spectrum_key=store_key(b), task="cv", model_id=SCRIPTED_LABEL,
                                              outcome="YES", verdict="YES"))
    assert s.state_of(a) == ("no_answer", None)
    assert s.state_of(b) == ("YES (demo)", None)


def test_a_label_naming_a_line_outside_its_window_is_warned_of(demo, tmp_path):
    s, messages = _session(demo, tmp_path)
    row = next(i for i, e in enumerate(demo[1]) if e.file_name != "aaa-notes.fits" and e.redshift is not None)
    assert s.go_to(row) and s.spectrum is not None
    assert s.save_notes([], "", [Evidence(3000, 3100, "Hα")])  # stored all the same: a warning, not a refusal
    assert messages[-1].startswith("warning: evidence window 3000-3100:Hα: the label names Hα")
    assert s.current_notes().evidence == [Evidence(3000, 3100, "Hα")]
