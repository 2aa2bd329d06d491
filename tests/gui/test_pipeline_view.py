"""The viewer's header line and the table show the survey pipeline's fit (issue #44)."""

from __future__ import annotations

import pytest

from speco3.gui.archive_model import COL, COLUMNS, HEADER_TIPS
from speco3.spectra import read_spectrum

pytestmark = pytest.mark.gui


@pytest.mark.parametrize("name,says", [
    ("desi/coadd-4-80613-thru20210324.fits", ["GALAXY", "z = 0.36874 ± 1e-06 (redrock)", "ZWARN 0", "Δχ² 150344"]),
    ("sdss/spec-0332-52367-0639.fits", ["QSO BROADLINE", "z = 0.10061 ± 4e-05", "ZWARNING 0", "S/N 29.6"]),
    ("lamost/spec-55859-F5902_sp01-001.fits.gz", ["STAR G7", "z = -0.00014 ± 2e-05 (LAMOST 1D pipeline)"]),
])
def test_header_names_class_z_error_and_warnings(qtbot, spectra_dir, name, says):
    from speco3.gui.viewer import SpectrumViewer

    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    viewer.set_spectrum(read_spectrum(spectra_dir / name))
    text = viewer.header.text()
    for part in says:
        assert part in text, (part, text)
    assert "ZWARN" not in text or "lamost" not in name


def test_table_has_pipeline_columns_with_tips():
    names = [c[0] for c in COLUMNS]
    assert {"cls", "subclass", "redshift", "z_err", "zwarn", "deltachi2", "snr", "survey_snr"} <= set(names)
    assert "0 is clean" in HEADER_TIPS["zwarn"] and COL["deltachi2"] > COL["zwarn"]
    from speco3.gui.archive_model import Filters

    f = Filters(zwarn_clean=True)
    assert f.index_kwargs()["zwarn_clean"] is True and "no z warning" in f.describe()
    assert "zwarn_clean" not in Filters().index_kwargs()


def test_sdss_model_is_overlaid_with_a_key_and_m_toggles_it(qtbot, spectra_dir, make_window, open_and_wait, tmp_path):
    import shutil

    import numpy as np
    from PySide6.QtCore import Qt

    sdss = read_spectrum(spectra_dir / "sdss/spec-0332-52367-0639.fits")
    assert sdss.model is not None and sdss.model.shape == sdss.flux.shape
    good = sdss.good
    assert np.corrcoef(sdss.model[good], sdss.flux[good])[0, 1] > 0.9  # the pipeline's fit follows the data
    assert read_spectrum(spectra_dir / "lamost/spec-55859-F5902_sp01-001.fits.gz").model is None
    folder = tmp_path / "a"
    folder.mkdir()
    shutil.copy(spectra_dir / "sdss/spec-0332-52367-0639.fits", folder)
    w = make_window()
    open_and_wait(w, folder)
    v = w.viewer
    drawn = int(np.count_nonzero(good & np.isfinite(sdss.model)))  # every good pixel: a masked one is a gap
    assert v.model_curve.xData is not None and len(v.model_curve.yData) == drawn  # as stored, no thinning
    assert v.legend.isVisible()
    qtbot.keyClick(w.archive.table, Qt.Key.Key_M)
    assert not v.show_model and (v.model_curve.xData is None or len(v.model_curve.xData) == 0)
    assert not v.legend.isVisible()
    qtbot.keyClick(w.archive.table, Qt.Key.Key_M)
    assert v.show_model and len(v.model_curve.yData) == drawn


def test_desi_header_says_why_redrock_is_not_drawn_and_lamost_flux_its_unit(qtbot, spectra_dir):
    """What the DESI test files hold: a redrock file whose REDSHIFTS table has the best fit only (its COEFF needs
    redrock's templates, not shipped; no next-best list): the header says so. LAMOST files state no flux unit."""
    from astropy.io import fits

    from speco3.gui.viewer import SpectrumViewer
    from speco3.spectra.model import REDROCK_NO_MODEL

    with fits.open(spectra_dir / "desi/redrock-4-80613-thru20210324.fits") as rr:
        cols = set(rr["REDSHIFTS"].columns.names)
        assert {"Z", "ZERR", "ZWARN", "COEFF", "DELTACHI2"} <= cols  # the best fit and its template coefficients
        assert not cols & {"Z_2", "ZNUM", "Z_NEXT"} and len(rr["REDSHIFTS"].data) == 1  # one row: no Nth-best list
        assert not any(h.name.startswith(("TEMPLATE", "MODEL")) for h in rr)  # no template or model spectrum
    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    viewer.set_spectrum(read_spectrum(spectra_dir / "desi/coadd-4-80613-thru20210324.fits"))
    assert viewer.spectrum.model is None and REDROCK_NO_MODEL in viewer.header.text()
    assert "templates are not shipped" in REDROCK_NO_MODEL and "rrdetails" in REDROCK_NO_MODEL
    viewer.set_spectrum(read_spectrum(spectra_dir / "sdss/spec-0332-52367-0639.fits"))
    assert "redrock" not in viewer.header.text()
    axis = viewer.plot.getPlotItem().getAxis("left")
    assert "10^-17" in axis.labelText or "1E-17" in axis.labelText.upper()  # SDSS's BUNIT, as the file states it
    lamost = read_spectrum(spectra_dir / "lamost/spec-55859-F5902_sp01-001.fits.gz")
    assert lamost.flux_unit == ""  # neither BUNIT nor TUNIT: the file states no unit
    viewer.set_spectrum(lamost)
    assert axis.labelText == "Flux (relative; no unit in the file)"


def test_z_err_and_deltachi2_filters(make_window, open_and_wait, spectra_dir, tmp_path):
    """The table's z-error and Δχ² filters (a spectrum whose file states neither is kept), kept with the session."""
    import shutil

    from speco3.gui.archive_model import Filters

    folder = tmp_path / "mixed"
    folder.mkdir()
    for name in ("desi/coadd-4-80613-thru20210324.fits", "desi/redrock-4-80613-thru20210324.fits",
                 "sdss/spec-0332-52367-0639.fits", "lamost/spec-55859-F5902_sp01-001.fits.gz"):
        shutil.copy(spectra_dir / name, folder)
    w = make_window()
    open_and_wait(w, folder)
    m, panel = w.table_model, w.archive

    def shown() -> set[str]:
        m.fetch_all()
        return {m.entry(r).survey for r in range(m.rowCount())}

    assert shown() == {"DESI", "SDSS", "LAMOST"}
    panel.deltachi2_min.setText("200000")  # above the DESI fit's 150344: it goes, the others state none
    panel.apply_filters()
    assert shown() == {"SDSS", "LAMOST"} and "Δχ² ≥ 200000" in m.filters.describe()
    panel.deltachi2_min.setText("100")
    panel.z_err_max.setText("1e-5")  # DESI 1e-06 stays, SDSS 4e-05 and LAMOST 2e-05 go
    panel.apply_filters()
    assert shown() == {"DESI"}
    assert Filters.of(w.vetting.session.view.filters) == m.filters  # remembered in the store for the next session
    assert Filters.of({"z_err_max": "x", "deltachi2_min": 5}).deltachi2_min == 5.0
