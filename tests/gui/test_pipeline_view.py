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
