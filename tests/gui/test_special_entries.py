"""Unreadable and special entries on real files: the reason in place, error spectra labelled, sky fibres out of the
queue unless asked; filters reset when another archive opens."""

from __future__ import annotations

import shutil

import pytest

from speco3.spectra import ArchiveIndex

pytestmark = pytest.mark.gui


@pytest.fixture
def special_archive(spectra_dir, tmp_path):
    folder = tmp_path / "special"
    folder.mkdir()
    for rel in ("generic/gbt_1d.fits", "generic/PH957_e.fits", "generic/PH957_f.fits",
                "desi/coadd-sv3-dark-26065.fits"):
        shutil.copy(spectra_dir / rel, folder)
    data = (spectra_dir / "sdss/spec-0266-51602-0638.fits").read_bytes()
    (folder / "truncated.fits").write_bytes(data[:20000])  # a copy cut short, as a failed transfer leaves it
    return folder


def _names(w) -> list[str]:
    return [w.table_model.entry(r).name for r in range(w.table_model.loaded_rows())]


def test_index_leaves_sky_fibres_and_fully_masked_out_when_asked(special_archive, tmp_path):
    ix = ArchiveIndex(tmp_path / "ix.sqlite")
    ix.scan(special_archive)
    (sky,) = ix.query(usable=False)
    assert sky.name == "coadd-sv3-dark-26065.fits#1" and sky.unusable == "a sky fibre"
    assert ix.count(usable=True) == ix.count() - 1
    assert sky.key not in {e.key for e in ix.query(usable=True)}


def test_unreadable_entries_say_why_in_place_of_the_plot(qtbot, make_window, special_archive, open_and_wait):
    w = make_window()
    open_and_wait(w, special_archive)
    names = _names(w)
    assert "coadd-sv3-dark-26065.fits#1" not in names  # the sky fibre is not in the queue
    assert {"gbt_1d.fits", "truncated.fits"} <= set(names)  # unreadable files stay listed, with their reason
    w.vetting.go_to(names.index("PH957_f.fits"))
    assert w.viewer.pages.currentWidget() is w.viewer.plot
    w.vetting.go_to(names.index("gbt_1d.fits"))
    assert w.viewer.spectrum is None
    assert w.viewer.pages.currentWidget() is w.viewer.notice  # not "No spectrum" over the last axes
    assert "VRAD" in w.viewer.notice.text() and "gbt_1d.fits" in w.viewer.notice.text()
    assert "cannot be shown" in w.viewer.header.text()
    w.vetting.go_to(names.index("truncated.fits"))
    assert "truncated" in w.viewer.notice.text()
    w.vetting.go_to(names.index("PH957_e.fits"))  # an error spectrum: plotted, and labelled as errors
    assert w.viewer.pages.currentWidget() is w.viewer.plot
    assert w.viewer.plot.getPlotItem().getAxis("left").labelText.startswith("Flux error (σ)")
    assert "error spectrum" in w.viewer.header.text()
    w.vetting.go_to(names.index("PH957_f.fits"))
    assert w.viewer.plot.getPlotItem().getAxis("left").labelText.startswith("Flux")
    assert not w.viewer.plot.getPlotItem().getAxis("left").labelText.startswith("Flux error")
    w.archive.unusable.setChecked(True)  # the filter that brings them back
    assert "coadd-sv3-dark-26065.fits#1" in _names(w)


def test_filters_reset_when_another_archive_opens(qtbot, make_window, special_archive, spectra_dir, tmp_path,
                                                  open_and_wait):
    w = make_window()
    open_and_wait(w, special_archive)
    surveys = [w.archive.survey.itemText(i) for i in range(w.archive.survey.count())]
    assert surveys[0] == "any survey" and set(surveys[1:]) == {"generic", "DESI"}  # this archive's own
    w.archive.survey.setCurrentText("DESI")
    assert set(_names(w)) == {"coadd-sv3-dark-26065.fits#0", "coadd-sv3-dark-26065.fits#2"}
    assert "filtered: survey DESI" in w.archive.count.text()
    other = tmp_path / "other"
    other.mkdir()
    for rel in ("sdss/spec-0266-51602-0638.fits", "lamost/spec-55859-F5902_sp01-001.fits.gz",
                "other/apStar-r6-2M00452143+1634446.fits"):
        shutil.copy(spectra_dir / rel, other)
    w.vetting.clear_current()  # open_and_wait then waits for the new archive's first spectrum
    open_and_wait(w, other)
    assert w.archive.survey.currentText() == "any survey"
    files = {n.split("#")[0] for n in _names(w)}
    assert len(files) == 3  # nothing hidden by the last archive's filter (apStar holds several spectra)
    assert "filtered" not in w.archive.count.text()
    assert "APOGEE" in [w.archive.survey.itemText(i) for i in range(w.archive.survey.count())]


def test_spectra_of_one_file_are_named_and_ordered_by_their_number(spectra_dir, tmp_path):
    """AAO.fits holds 51 spectra: listed #0, #1, #2 … #10 (not #1, #10, #11 … #2), the first as #0."""
    folder = tmp_path / "aao"
    folder.mkdir()
    shutil.copy(spectra_dir / "other/AAO.fits", folder)
    shutil.copy(spectra_dir / "sdss/spec-0266-51602-0638.fits", folder)
    ix = ArchiveIndex(tmp_path / "ix.sqlite")
    ix.scan(folder)
    names = [e.name for e in ix.query(sort="key")]
    n = sum(1 for name in names if name.startswith("AAO.fits"))
    assert n > 10
    assert names[:n] == [f"AAO.fits#{i}" for i in range(n)]
    assert names[n:] == ["spec-0266-51602-0638.fits"]  # a file with one spectrum keeps its plain name
    assert ix.get(ix.query(sort="key")[3].key).name == "AAO.fits#3"
