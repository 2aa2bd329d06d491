"""The viewer's header line and the table show the survey pipeline's fit (issue #44)."""

from __future__ import annotations

import pytest

from speco3.gui.archive_model import COL, COLUMNS, HEADER_TIPS
from speco3.spectra import read_spectrum

pytestmark = pytest.mark.gui


@pytest.mark.parametrize("name,says", [
    ("desi/coadd-4-80613-thru20210324.fits", ["GALAXY", "z = 0.36874 ± 1e-06 (redrock)", "ZWARN 0", "Δχ² 150344"]),
    ("sdss/spec-0332-52367-0639.fits", ["QSO BROADLINE", "z = 0.10061 ± 4e-05", "ZWARNING 0", "S/N 4000–8000 Å 29.6"]),
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
