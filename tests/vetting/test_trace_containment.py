"""A store's ``trace_dir`` is read only inside the store's own folder tree or the traces folder the app writes
(docs/threat-model.md): a copied or hostile store cannot make the app or the report open ``/etc``, a link out of
its folder or a ``..`` path, while a store moved together with its traces still shows them."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from speco3.agent import TraceError
from speco3.config import data_dir
from speco3.vetting import VettingStore
from speco3.vetting.report import write_report

KEY = "/data/spec00.fits#0"


def _set_trace_dir(store: VettingStore, value: str) -> None:
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE model_verdicts SET trace_dir=? WHERE spectrum_key=?", (value, KEY))


def _trace_dir(store: VettingStore) -> Path:
    return Path(store.latest_model_verdict(KEY, "cv").trace_dir)


@pytest.fixture
def outside(filled_store, tmp_path_factory) -> Path:
    """A valid trace in a folder that is not the store's: what a hostile store would point at."""
    where = tmp_path_factory.mktemp("elsewhere") / "stolen"
    shutil.copytree(_trace_dir(filled_store), where)
    return where


def _refused(store: VettingStore, value: str) -> None:
    _set_trace_dir(store, value)
    with pytest.raises(TraceError, match=r"^not shown: trace folder outside the store's folder \(") as info:
        store.load_trace(value)
    assert value in str(info.value)


def test_trace_dir_naming_a_system_folder_is_refused(filled_store):
    _refused(filled_store, "/etc")
    _refused(filled_store, str(Path.home() / ".ssh"))


def test_a_valid_trace_outside_the_store_is_not_read(filled_store, outside):
    _refused(filled_store, str(outside))
    _refused(filled_store, str(outside / "trace.json"))


def test_a_link_out_of_the_store_folder_is_refused(filled_store, outside, tmp_path):
    (tmp_path / "traces" / "cv" / "evil").symlink_to(outside, target_is_directory=True)
    _refused(filled_store, str(tmp_path / "traces" / "cv" / "evil"))
    _refused(filled_store, "traces/cv/evil")


def test_dotdot_segments_that_leave_the_store_folder_are_refused(filled_store, outside, tmp_path):
    up = Path(*[".."] * len(tmp_path.parts))
    _refused(filled_store, str(up / outside.relative_to("/")))
    _refused(filled_store, str(tmp_path / "traces" / ".." / ".." / outside.relative_to("/")))


def test_a_trace_json_linked_out_of_its_folder_is_not_read(filled_store, outside, tmp_path):
    folder = tmp_path / "traces" / "cv" / "linked"
    folder.mkdir()
    (folder / "trace.json").symlink_to(outside / "trace.json")
    with pytest.raises(TraceError, match="leads out of its folder"):
        filled_store.load_trace(str(folder))


def test_legit_traces_are_read_absolute_relative_and_after_a_move(filled_store, tmp_path):
    where = _trace_dir(filled_store)
    assert where.is_absolute() and filled_store.load_trace(str(where)).verdict == "NO"  # as `vet` writes them
    assert filled_store.load_trace(str(where / "trace.json")).verdict == "NO"
    rel = where.relative_to(tmp_path)
    assert filled_store.load_trace(str(rel)).verdict == "NO"  # beside the store
    assert filled_store.load_trace(f"{tmp_path.name}/{rel}").verdict == "NO"  # stored by a run one folder up
    assert filled_store.load_trace(str(tmp_path / "traces" / ".." / rel)).verdict == "NO"  # '..' that stays inside
    # the app's own traces folder (data folder/traces), and one the caller names (the app's chosen data folder)
    own = data_dir() / "traces" / "cv" / "x"
    shutil.copytree(where, own)
    assert filled_store.load_trace(str(own)).verdict == "NO"
    chosen = tmp_path.parent / f"{tmp_path.name}-data" / "traces" / "cv" / "x"
    shutil.copytree(where, chosen)
    with pytest.raises(TraceError, match="not shown"):
        filled_store.load_trace(str(chosen))
    assert filled_store.load_trace(str(chosen), [chosen.parent.parent]).verdict == "NO"
    # a night's folder moved, store and traces together: the absolute paths it holds are found beside it
    filled_store.close()
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    shutil.copytree(tmp_path, moved, symlinks=True)
    shutil.rmtree(tmp_path / "traces")
    store = VettingStore(moved / "results.sqlite")
    try:
        assert store.load_trace(str(where)).verdict == "NO"
        assert store.trace_folder(str(where)) == (moved / rel).resolve()
    finally:
        store.close()


def test_html_report_names_a_refused_trace_and_reads_nothing(filled_store, outside, tmp_path):
    _set_trace_dir(filled_store, str(outside))
    html = write_report(filled_store, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "not shown: trace folder outside the store&#39;s folder" in html or \
        "not shown: trace folder outside the store's folder" in html
    assert str(outside) in html
