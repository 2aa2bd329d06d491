"""Archive index: full scan of the shared spectra, incremental rescans, dependencies, queries and paging."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from speco3.errors import SpectrumReadError
from speco3.spectra import ArchiveIndex, IndexEntry
from speco3.spectra import index as index_mod


def _bump(path, seconds=10):
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + seconds * 1_000_000_000))


@pytest.fixture(scope="module")
def shared_index(tmp_path_factory, spectra_dir):
    """The whole shared spectra folder scanned once (process pool, 2 workers)."""
    db = tmp_path_factory.mktemp("idx") / "shared.sqlite"
    ix = ArchiveIndex(db)
    calls = []
    summary = ix.scan(spectra_dir, progress=lambda p, d, t: calls.append((d, t, p)), workers=2)
    yield ix, summary, calls
    ix.close()


def test_full_scan_counts(shared_index, spectra_dir):
    ix, summary, calls = shared_index
    n_files = sum(1 for p in spectra_dir.rglob("*") if p.is_file() and p.name != "README.md")
    assert summary.files_seen == summary.files_read == n_files == 49
    assert calls[-1][:2] == (n_files, n_files) and len(calls) == n_files
    s = ix.summary()
    assert s["files"] == 49 and s["errors"] == 1 and s["companions"] == 1
    assert s["spectra"] == 193 == ix.count(has_error=False)
    assert s["by_format"]["lamost-mrs"] == 44 and s["by_format"]["desi"] == 11
    assert s["by_survey"]["SDSS"] == 11
    assert s["skipped"] == 10  # unassigned DESI fibres: 3 + 3 + 2 + 2
    assert s["errors_by_kind"] == {"read error": 1}


def test_errors_are_rows(shared_index):
    ix, _, _ = shared_index
    errs = ix.errors()
    assert [e.key for e in errs] == ["generic/gbt_1d.fits#0"]
    assert "VRAD" in errs[0].error
    with pytest.raises(SpectrumReadError, match="VRAD"):
        errs[0].load()


def test_redrock_is_a_companion_not_an_entry(shared_index):
    """The redrock catalogue is read with its coadd: no row of its own (neither spectrum nor error)."""
    ix, _, _ = shared_index
    assert ix.companions() == ["desi/redrock-4-80613-thru20210324.fits"]
    assert not [e for e in ix.query(sort="key") if "redrock" in e.key]
    coadd = ix.query(text="coadd-4-80613", has_error=False, sort="key")
    assert coadd and all(e.redshift_source == "redrock" for e in coadd)


def test_entries_and_load(shared_index, spectra_dir):
    ix, _, _ = shared_index
    e = ix.get("desi/coadd-4-80613-thru20210324.fits#0")
    assert isinstance(e, IndexEntry)
    assert Path(e.path).samefile(spectra_dir / "desi/coadd-4-80613-thru20210324.fits")
    assert (e.cls, e.redshift_source, e.n_pixels) == ("GALAXY", "redrock", 7781)
    assert e.redshift == pytest.approx(0.36874, abs=1e-5)
    assert (e.wmin, e.wmax) == pytest.approx((3600.0, 9824.0), abs=0.1)
    assert e.file_size == (spectra_dir / "desi/coadd-4-80613-thru20210324.fits").stat().st_size
    spec = e.load()
    assert spec.meta.object_id == e.object_id == "39633345008634465"
    mrs = ix.get("lamost/med-58408-TD230151N343645T01_sp01-015.fits#1")
    assert mrs.hdu == "COADD_R" and mrs.name == "med-58408-TD230151N343645T01_sp01-015.fits#1"
    assert ix.get("nope.fits#0") is None


def test_query_filters_sort_and_paging(shared_index):
    ix, _, _ = shared_index
    qso = ix.query(cls="QSO", sort="redshift", descending=True)
    assert [round(e.redshift, 4) for e in qso] == [1.1885, 0.4565, 0.2446, 0.1006]
    assert ix.count(cls="qso") == 4  # case-insensitive
    assert [e.key for e in ix.query(survey="SDSS", z_min=0.1, z_max=0.2, sort="redshift")] == [
        "sdss/spec-0332-52367-0639.fits#0", "sdss/spec-0266-51602-0638.fits#0",
        "sdss/spec-0266-51602-0107.fits#0", "sdss/spec-0295-51585-0596.fits#0"]
    assert all(e.snr >= 100 for e in ix.query(snr_min=100)) and ix.count(snr_min=100) >= 3
    assert [e.key for e in ix.query(text="101001")] == ["lamost/spec-55859-F5902_sp01-001.fits.gz#0",
                                                        "lamost/spec-55859-F5902_sp01-001_dr7.fits.gz#0"]
    assert ix.count(text="5902_sp01-001") == 2
    assert ix.count(text="5902Xsp01") == ix.count(text="5902%sp01") == 0  # _ and % are literal, not wildcards
    everything = ix.query(sort="key")
    assert len(everything) == ix.count() == 194  # 193 spectra + 1 unreadable file; the redrock companion has no row
    pages = [ix.query(sort="key", limit=50, offset=o) for o in (0, 50, 100, 150)]
    assert [e.key for p in pages for e in p] == [e.key for e in everything]
    assert len(pages[-1]) == 44
    names = [e.file_name for e in ix.query()]
    assert names == sorted(names)
    with pytest.raises(ValueError, match="cannot sort by"):
        ix.query(sort="flux; DROP TABLE spectra")


def test_indexes_exist_for_filters_and_sorting(shared_index):
    ix, _, _ = shared_index
    def plan(where: str, order: str) -> str:
        sql = f"EXPLAIN QUERY PLAN SELECT key FROM spectra {where} ORDER BY {order} LIMIT 10"
        return " ".join(str(r) for r in ix._db.execute(sql))

    # filters and sorts the GUI uses run on an index: no table scan, no temporary sort
    for where, order in (("", "file_name, key"), ("", "redshift DESC, key DESC"), ("WHERE cls='qso'", "snr, key"),
                         ("WHERE survey='SDSS'", "key"), ("WHERE has_error=1", "key")):
        p = plan(where, order)
        assert "USING" in p and "TEMP B-TREE" not in p, (where, order, p)
    assert ix._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_incremental_rescan(small_archive, tmp_path):
    ix = ArchiveIndex(tmp_path / "small.sqlite")
    first = ix.scan(small_archive, workers=1)
    assert (first.files_seen, first.files_read, first.errors, first.companions) == (7, 7, 0, 1)
    assert ix.count(has_error=False) == 6
    again = ix.scan(small_archive)
    assert (again.files_read, again.files_unchanged, again.files_removed) == (0, 7, 0)

    _bump(small_archive / "lamost/spec-55859-F5902_sp01-002.fits.gz")
    seen = []
    touched = ix.scan(small_archive, progress=lambda p, d, t: seen.append(p))
    assert touched.files_read == 1 and seen == ["lamost/spec-55859-F5902_sp01-002.fits.gz"]

    # a changed redrock file makes its coadd re-read (dependency), nothing else
    _bump(small_archive / "desi/redrock-4-80613-thru20210324.fits")
    seen.clear()
    ix.scan(small_archive, progress=lambda p, d, t: seen.append(p))
    assert sorted(seen) == ["desi/coadd-4-80613-thru20210324.fits", "desi/redrock-4-80613-thru20210324.fits"]

    (small_archive / "lamost/spec-58397-EG014118N254444M01_sp03-031.fits").unlink()
    (small_archive / "lamost/broken.fits").write_bytes(b"SIMPLE  = garbage")
    after = ix.scan(small_archive)
    assert (after.files_removed, after.files_read, after.errors) == (1, 1, 1)
    assert ix.get("lamost/spec-58397-EG014118N254444M01_sp03-031.fits#0") is None
    broken = ix.get("lamost/broken.fits#0")
    assert broken.error.startswith("corrupt FITS") and ix.count(has_error=True) == 1
    ix.close()


def test_redrock_removed_then_coadd_loses_redshift(small_archive, tmp_path):
    ix = ArchiveIndex(tmp_path / "rr.sqlite")
    ix.scan(small_archive)
    assert ix.get("desi/coadd-4-80613-thru20210324.fits#0").cls == "GALAXY"
    (small_archive / "desi/redrock-4-80613-thru20210324.fits").unlink()
    ix.scan(small_archive)
    e = ix.get("desi/coadd-4-80613-thru20210324.fits#0")
    assert e.cls is None and e.redshift is None
    ix.close()


def test_for_root_uses_cache_dir(small_archive, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECO3_CACHE_DIR", str(tmp_path / "cache"))
    ix = ArchiveIndex.for_root(small_archive)
    assert ix.db_path.parent == tmp_path / "cache" / "indexes" and ix.db_path.suffix == ".sqlite"
    assert ix.root == str(small_archive.resolve())
    same = ArchiveIndex.for_root(str(small_archive) + "/lamost/..")
    assert same.db_path == ix.db_path
    ix.close()
    same.close()


def test_progress_callback_can_cancel(small_archive, tmp_path):
    ix = ArchiveIndex(tmp_path / "cancel.sqlite")

    def cancel(path, done, total):
        if done == 2:
            raise InterruptedError("stop")

    with pytest.raises(InterruptedError):
        ix.scan(small_archive, progress=cancel, workers=1)
    resumed = ix.scan(small_archive, workers=1)
    assert resumed.files_read == 5  # the two files done before cancelling were kept
    ix.close()


def test_pool_and_inline_scans_agree(small_archive, tmp_path, monkeypatch):
    monkeypatch.setattr(index_mod, "POOL_THRESHOLD", 1)
    pooled = ArchiveIndex(tmp_path / "pool.sqlite")
    t = time.perf_counter()
    pooled.scan(small_archive, workers=2)
    assert time.perf_counter() - t < 60
    inline = ArchiveIndex(tmp_path / "inline.sqlite")
    inline.scan(small_archive, workers=1)
    a = [(e.key, e.redshift, e.n_pixels, e.error) for e in pooled.query(sort="key")]
    b = [(e.key, e.redshift, e.n_pixels, e.error) for e in inline.query(sort="key")]
    assert a == b and len(a) == 6
    assert pooled.companions() == inline.companions() == ["desi/redrock-4-80613-thru20210324.fits"]
    pooled.close()
    inline.close()


def test_not_a_database(tmp_path):
    bogus = tmp_path / "bogus.sqlite"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(index_mod.ArchiveIndexError, match="not a usable archive index"):
        ArchiveIndex(bogus)


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_for_root_of_missing_folder_raises_and_creates_nothing(tmp_path, monkeypatch, kind):
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECO3_CACHE_DIR", str(cache))
    root = tmp_path / "no-such-archive"
    if kind == "file":
        root.write_text("not a folder")
    with pytest.raises(index_mod.ArchiveIndexError, match="archive folder not found" if kind == "missing" else "not a folder"):
        ArchiveIndex.for_root(root)
    assert not cache.exists()  # neither the database nor the indexes folder
    assert not list(tmp_path.rglob("*.sqlite"))
