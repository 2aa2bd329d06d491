"""The HTML report draws the spectrum and the evidence windows of a human decision without a model run (issue #44),
through the command line's renderer (this layer imports no Qt)."""

from __future__ import annotations

import re

from speco3.cli import main
from speco3.spectra import read_spectrum
from speco3.vetting.records import Decision, Evidence, SpectrumInfo
from speco3.vetting.store import VettingStore


def test_human_only_decision_gets_full_view_and_evidence_windows(tmp_path, spectra_dir):
    path = spectra_dir / "sdss/spec-0332-52367-0639.fits"
    s = read_spectrum(path)
    key = f"{path}#0"
    with VettingStore(tmp_path / "s.sqlite") as store:
        store.record_spectrum(SpectrumInfo.of(key, s))
        store.record_decision(Decision(key, "cv", "NO", vetter="Ana", comment="a QSO",
                                       evidence=[Evidence(5480, 5540, "[O III] <5007>"), Evidence(7150, 7300, "Hα")]))
        missing = f"{tmp_path / 'gone.fits'}#0"
        store.record_spectrum(SpectrumInfo(missing, "gone.fits", str(tmp_path / "gone.fits")))
        store.record_decision(Decision(missing, "cv", "YES", vetter="Ana", evidence=[Evidence(5000, 5100)]))
    assert main(["export", str(tmp_path / "s.sqlite"), "--html", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert html.count('alt="evidence window"') == 2 and "Full spectrum (rest frame), drawn for the report" in html
    assert "Evidence 1: [O III] &lt;5007&gt; — 5480–5540 Å (observed)" in html  # escaped
    assert len(re.findall(r'src="data:image/png;base64,', html)) >= 3
    assert "Spectrum not drawn:" in html and "gone.fits" in html  # the missing file is named, the rest is written
