"""Seeded FITS fuzzing: every mutated file gives valid spectra or a `SpectrumReadError` naming it, quickly.

``SPECO3_FUZZ_CASES`` sets the number of cases (default 300), ``SPECO3_FUZZ_SEED`` the seed (default 0).
``benchmarks/bench_fuzz.py`` runs thousands in subprocess chunks (so that C-level hangs are caught too).
"""

from __future__ import annotations

import collections
import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from speco3.errors import SpectrumReadError
from speco3.spectra import read_spectra
from speco3_testkit import fitsfuzz

N_CASES = int(os.environ.get("SPECO3_FUZZ_CASES", "300"))
SEED = int(os.environ.get("SPECO3_FUZZ_SEED", "0"))
LIMIT_S = 2.0


def test_generator_is_seeded_and_covers_every_kind(spectra_dir):
    a = [(c.name, c.data) for c in fitsfuzz.generate(spectra_dir, 60, seed=7)]
    b = [(c.name, c.data) for c in fitsfuzz.generate(spectra_dir, 60, seed=7)]
    c = [(c.name, c.data) for c in fitsfuzz.generate(spectra_dir, 60, seed=8)]
    assert a == b and a != c
    kinds = {name.split("-")[1] for name, _ in a}
    assert kinds <= set(fitsfuzz.KINDS) and len(kinds) >= 9, kinds
    assert len(a) == 60


def test_check_spectrum_rejects_contract_breaks(real_spectrum):
    """The validity check itself can fail: descending wavelengths or a missing path are reported."""
    assert fitsfuzz.check_spectrum(real_spectrum) is None
    import copy

    bad = copy.deepcopy(real_spectrum)
    bad.wavelength = bad.wavelength[::-1].copy()
    assert fitsfuzz.check_spectrum(bad) == "wavelength not ascending"
    bad = copy.deepcopy(real_spectrum)
    bad.meta.path = None
    assert "meta.path" in fitsfuzz.check_spectrum(bad)


def test_run_case_classifies_hangs_and_crashes(tmp_path):
    """The harness reports a hang (even when the reader swallows ``Exception``) and a foreign exception."""
    case = fitsfuzz.Case("x", "truncate", b"SIMPLE", ".fits")

    def sleepy(path):
        try:
            import time

            time.sleep(5)
        except Exception:  # a reader's broad handler must not hide the timeout
            return []
        return []

    assert fitsfuzz.run_case(case, tmp_path, sleepy, SpectrumReadError, timeout_s=0.1, hard_factor=2)["outcome"] == "hang"

    def boom(path):
        raise KeyError("NAXIS2")

    res = fitsfuzz.run_case(case, tmp_path, boom, SpectrumReadError, timeout_s=1)
    assert res["outcome"] == "crash" and "KeyError" in res["error"]
    assert not list(tmp_path.iterdir())  # the case file is removed


def test_fuzzed_files_give_spectra_or_typed_errors(spectra_dir, tmp_path):
    results = [fitsfuzz.run_case(case, tmp_path, read_spectra, SpectrumReadError, timeout_s=LIMIT_S)
               for case in fitsfuzz.generate(spectra_dir, N_CASES, seed=SEED)]
    assert len(results) == N_CASES
    outcomes = collections.Counter(r["outcome"] for r in results)
    bad = [r for r in results if r["outcome"] not in ("ok", "error")]
    assert not bad, f"{outcomes}: " + "; ".join(f"{r['case']} {r['outcome']} {r.get('error', '')}"[:200] for r in bad[:8])
    unnamed = [r for r in results if r["outcome"] == "error" and not r["named_file"]]
    assert not unnamed, [r["error"] for r in unnamed[:5]]
    # Both outcomes occur (a mutator that never breaks anything, or a reader that refuses everything, fails here).
    assert outcomes["ok"] > N_CASES // 10 and outcomes["error"] > N_CASES // 10, outcomes
    slowest = max(results, key=lambda r: r["seconds"])
    assert slowest["seconds"] < LIMIT_S, slowest


@pytest.mark.parametrize("naxis", [999, 1000, 99999999, 2**31 - 1, -1])
def test_lying_naxis_is_refused_quickly(spectra_dir, tmp_path, naxis):
    """A primary header claiming millions of axes made astropy loop for minutes; it must fail fast and typed.

    999 axes is legal FITS (the missing NAXISn count as 0): a spectrum or a typed error, quickly.
    """
    raw = (spectra_dir / "other/emlLinearSkyAirNoHelio.fits").read_bytes()
    data = fitsfuzz.set_card(raw, "NAXIS", str(naxis))
    res = fitsfuzz.run_case(fitsfuzz.Case(f"naxis{naxis}", "lie_naxis", data, ".fits"), tmp_path, read_spectra,
                            SpectrumReadError, timeout_s=LIMIT_S)
    if naxis == 999:
        assert res["outcome"] in ("ok", "error"), res
    else:
        assert res["outcome"] == "error" and res["named_file"], res


def test_lying_naxis_in_gzip_is_refused_quickly(spectra_dir, tmp_path):
    raw = (spectra_dir / "other/emlLinearSkyAirNoHelio.fits").read_bytes()
    data = gzip.compress(fitsfuzz.set_card(raw, "NAXIS", "99999999"))
    res = fitsfuzz.run_case(fitsfuzz.Case("naxisgz", "lie_naxis", data, ".fits.gz"), tmp_path, read_spectra,
                            SpectrumReadError, timeout_s=LIMIT_S)
    assert res["outcome"] == "error" and res["named_file"], res


def test_damaged_header_listing_gives_typed_error(spectra_dir, tmp_path):
    """Regression: an unknown-layout message listed the HDUs and raised KeyError/VerifyError on damaged headers."""
    raw = (spectra_dir / "sdss/spec-0295-51585-0596.fits").read_bytes()
    data = fitsfuzz.set_card(raw, "TFORM1", "'ZZ'")
    assert data is not None
    res = fitsfuzz.run_case(fitsfuzz.Case("tform", "lie_tform", data, ".fits"), tmp_path, read_spectra,
                            SpectrumReadError, timeout_s=LIMIT_S)
    assert res["outcome"] in ("ok", "error"), res
    assert np.isfinite(res["seconds"])


@pytest.mark.parametrize(("key", "value"), [("NAXIS1", "-1"), ("NAXIS2", "-4101"), ("PCOUNT", "-5")])
def test_negative_sizes_are_refused_quickly(spectra_dir, tmp_path, key, value):
    """A negative NAXISn in a table header made astropy walk back over the same headers without end."""
    raw = (spectra_dir / "sdss/spec-0266-51602-0638.fits").read_bytes()
    data = fitsfuzz.set_card(raw, key, value, occurrence=1 if key.startswith("NAXIS") else 0)
    res = fitsfuzz.run_case(fitsfuzz.Case(f"neg{key}", "lie_naxis", data, ".fits"), tmp_path, read_spectra,
                            SpectrumReadError, timeout_s=LIMIT_S)
    assert res["outcome"] == "error" and res["named_file"], res
    assert "negative" in res["reason"]


@pytest.mark.parametrize(("name", "keep"), [("sdss/spec-0266-51602-0638.fits", 0.85),
                                             ("sdss/sample_sdss.fits", 0.55),
                                             ("other/apStar-r6-2M03290406+3117075.fits", 0.56)])
def test_file_cut_after_the_data_used_is_reported_truncated(spectra_dir, tmp_path, name, keep):
    """A half-copied file whose cut lies past the HDUs a reader touches read as complete (astropy never warned)."""
    raw = (spectra_dir / name).read_bytes()
    case = fitsfuzz.Case(f"cut-{Path(name).stem}", "truncate", raw[: int(len(raw) * keep)], ".fits")
    res = fitsfuzz.run_case(case, tmp_path, read_spectra, SpectrumReadError, timeout_s=LIMIT_S)
    assert res["outcome"] == "error" and "truncated" in res["reason"], res
    whole = fitsfuzz.run_case(fitsfuzz.Case("whole", "none", raw, ".fits"), tmp_path, read_spectra,
                              SpectrumReadError, timeout_s=LIMIT_S)
    assert whole["outcome"] == "ok", whole
