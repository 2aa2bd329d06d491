"""A vetting store the vetter chose (a night's ``spec-o3 vet`` store) and its archive (issue #44 item 1, Qt-free):
whether the store fits (its spectrum keys against the archive's index, the archive it names), the stores found beside
an archive, the session opening a chosen store (refused without a change when it belongs elsewhere, read-only in a
place that cannot be written), and traces found beside a store."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from speco3.demo import write_demo_archive
from speco3.errors import StoreError
from speco3.spectra import ArchiveIndex
from speco3.vetting import VettingStore
from speco3.vetting.archive_store import store_fit, stores_beside
from speco3.vetting.records import Decision, ModelVerdict
from speco3.vetting.session import ListQueue, VettingSession, store_key
from speco3.vetting.store import ARCHIVE_ROOT_STATE
from speco3_testkit.readonly import read_only_folder


@dataclass
class Settings:
    auto_advance: bool = False

    def vetter_name(self) -> str:
        return "Ana"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> tuple[Path, list, ArchiveIndex]:
    tmp = tmp_path_factory.mktemp("night")
    folder = write_demo_archive(tmp / "nights" / "archive")[0].parent.resolve()
    ix = ArchiveIndex(tmp / "index.sqlite")
    ix.scan(folder, workers=1)
    entries = list(ix.query(limit=1000))
    yield folder, entries, ix
    ix.close()


def _holds(ix: ArchiveIndex):
    root = Path(ix.root or "")

    def holds(key: str) -> bool:
        path, _, n = key.rpartition("#")
        return Path(path).is_relative_to(root) and ix.get(f"{Path(path).relative_to(root).as_posix()}#{n}") is not None

    return holds


def _night_store(path: Path, root: Path, keys: list[str], verdict: str = "YES") -> Path:
    """A store as ``spec-o3 vet`` leaves it: the archive it screened and a verdict per spectrum."""
    with VettingStore(path) as s:
        s.set_state(ARCHIVE_ROOT_STATE, str(root))
        for k in keys:
            s.record_model_verdict(ModelVerdict(spectrum_key=k, task="cv", model_id="m", verdict=verdict,
                                                outcome=verdict, trace_dir=None))
    return path


def test_store_fit_by_keys_and_named_archive(archive, tmp_path):
    folder, entries, ix = archive
    keys = [store_key(e) for e in entries[:5]]
    fit = store_fit(_night_store(tmp_path / "r.sqlite", folder, keys), folder, _holds(ix))
    assert (fit.keys, fit.checked, fit.in_archive, fit.verdicts, fit.decisions) == (5, 5, 5, 5, 0)
    assert fit.names_this_archive and fit.problem() is None and fit.note() is None
    assert fit.describe() == f"r.sqlite: 5 model verdicts, 0 decisions, written for {folder}"

    other = store_fit(_night_store(tmp_path / "o.sqlite", Path("/elsewhere"), ["/elsewhere/a.fits#0"]), folder,
                      _holds(ix))
    assert other.problem() == (f"{tmp_path / 'o.sqlite'} holds verdicts or decisions of 1 spectra, none of them in "
                               f"{folder} (it was written for /elsewhere)")
    part = store_fit(_night_store(tmp_path / "p.sqlite", folder, [*keys[:2], "/elsewhere/a.fits#0"]), folder,
                     _holds(ix))
    assert part.problem() is None and part.note() == ("1 of 3 spectra of p.sqlite checked are not in this archive "
                                                      "(their rows stay in the store)")
    empty = tmp_path / "e.sqlite"
    VettingStore(empty).close()
    assert store_fit(empty, folder, _holds(ix)).problem() is None  # a new store fits any archive
    (tmp_path / "notes.sqlite").write_text("not a database")
    with pytest.raises(StoreError):
        store_fit(tmp_path / "notes.sqlite", folder, _holds(ix))


def test_stores_beside_the_archive_or_its_parent(archive, tmp_path):
    folder, entries, ix = archive
    keys = [store_key(e) for e in entries[:3]]
    beside = _night_store(folder.parent / "r.sqlite", folder, keys)
    _night_store(folder.parent / "other.sqlite", Path("/elsewhere"), ["/elsewhere/a.fits#0"])
    (folder.parent / "garbage.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    try:
        found = stores_beside(folder, _holds(ix))
        assert [f.path for f in found] == [beside]
        assert stores_beside(folder, _holds(ix), exclude=beside) == []
    finally:
        for name in ("r.sqlite", "other.sqlite", "garbage.sqlite"):
            for suffix in ("", "-wal", "-shm"):
                (folder.parent / f"{name}{suffix}").unlink(missing_ok=True)


def test_the_session_opens_a_chosen_store_and_refuses_another_archives(archive, tmp_path):
    folder, entries, ix = archive
    keys = [store_key(e) for e in entries]
    night = _night_store(tmp_path / "r.sqlite", folder, keys[:4], "NO")
    s = VettingSession(Settings(), lambda e: e.load())
    messages: list[str] = []
    s.message.connect(messages.append)
    own = tmp_path / "own.sqlite"
    assert s.open_archive(folder, own).opened
    foreign = _night_store(tmp_path / "o.sqlite", Path("/elsewhere"), ["/elsewhere/a.fits#0"])
    with pytest.raises(StoreError, match="none of them in .*not opened for this archive"):
        s.open_archive(folder, foreign, holds=_holds(ix))
    assert s.store is not None and s.store.path == own  # the session as it was
    opened = s.open_archive(folder, night, holds=_holds(ix))
    assert opened.opened and opened.fit is not None and opened.fit.verdicts == 4
    s.set_queue(ListQueue(entries))
    assert s.go_to(0)
    assert s.state_of(entries[0]) == ("NO", None)
    assert s.decide("YES", [], "", [], fit=(0.001, 3, "CV", None))
    s.close()
    with VettingStore(night, readonly=True) as st:
        d = st.decision(keys[0], "cv")
        assert d is not None and (d.decision, d.vetter, d.vetter_z) == ("YES", "Ana", 0.001)
        assert st.get_state(ARCHIVE_ROOT_STATE) == str(folder)


def test_a_chosen_store_in_a_read_only_place_is_browsed_not_replaced(archive, tmp_path):
    folder, entries, ix = archive
    keys = [store_key(e) for e in entries[:3]]
    src = _night_store(tmp_path / "src.sqlite", folder, keys)
    ro = tmp_path / "ro"
    with read_only_folder(ro, lambda f: shutil.copy(src, f / "r.sqlite")):
        s = VettingSession(Settings(), lambda e: e.load())
        opened = s.open_archive(folder, ro / "r.sqlite", holds=_holds(ix))
        assert opened.opened and opened.unsaved is None and s.store is not None and not s.store.is_in_memory
        assert s.read_only is not None and "cannot be written there" in s.read_only
        s.set_queue(ListQueue(entries))
        assert s.go_to(0) and s.state_of(entries[0]) == ("YES", None)
        assert not s.decide("NO", [], "", [])  # refused, with the reason
        s.close()


def test_trace_paths_of_a_store_found_beside_it(archive, tmp_path):
    folder, _entries, _ix = archive
    night = tmp_path / "night"
    (night / "r_traces" / "cv" / "x-1").mkdir(parents=True)
    s = VettingSession(Settings(), lambda e: e.load())
    assert s.open_archive(folder, night / "r.sqlite").opened
    assert s.store is not None
    x = (night / "r_traces" / "cv" / "x-1").resolve()
    assert s.store.trace_folder("night/r_traces/cv/x-1") == x  # stored by a run one folder up
    assert s.store.trace_folder("r_traces/cv/x-1") == x
    assert s.store.trace_folder(str(night / "gone")) == (night / "gone").resolve()
    s.close()


def test_decisions_stay_with_their_store(archive, tmp_path):
    """The app's own store and the night's are separate files: a decision in one is not in the other."""
    folder, entries, ix = archive
    key = store_key(entries[1])
    night = _night_store(tmp_path / "r.sqlite", folder, [key])
    with VettingStore(tmp_path / "own.sqlite") as own:
        own.record_decision(Decision(key, "cv", "NO", vetter="Bo"))
    s = VettingSession(Settings(), lambda e: e.load())
    assert s.open_archive(folder, night, holds=_holds(ix)).opened
    s.set_queue(ListQueue(entries))
    assert s.go_to(1) and s.state_of(entries[1]) == ("YES", None)
    s.close()
