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
# A hang guard, not a speed goal (speed is bench_fuzz's): a case reads in well under 0.2 s on a quiet machine;
# 2 s was exceeded under a load average of 10. The hangs it guards against took minutes.
LIMIT_S = 10.0


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


# What each mutation kind may do to a file the readers accept unmutated.
#   ("error", text): only a typed error, whose reason contains ``text``;
#   "same": a typed error, or spectra identical to the unmutated file's: these mutations touch header cards or
#           HDUs the readers do not use, so any other result would be a silent misread;
#   N (an int): a typed error, or as many spectra as the unmutated file gives, of which at most N finite pixels per
#           spectrum are new or changed (``bitflip_data`` flips at most 200 bits of the data; ``nan_inf`` writes
#           only non-finite values, but DESI spectra combine the B, R and Z arms where they overlap, so a NaN in
#           one arm changes the combined value there: at most the ~340 overlap pixels);
#   "valid": a typed error, or spectra that keep the `Spectrum` contract (`fitsfuzz.check_spectrum`): the mutation
#           legitimately changes what the data mean (another BITPIX, a column of strings, a flipped header byte).
EXPECT = {
    "truncate": ("error", ""),
    "gzip_corrupt": ("error", "corrupt or truncated gzip stream"),
    "broken_continue": "same",
    "lie_naxis": "same",
    "lie_tform": "same",
    "zero_length": "same",
    "bitflip_data": 200,
    "nan_inf": 400,
    "lie_bitpix": "valid",
    "wrong_column_type": "valid",
    "bitflip_header": "valid",
}
TYPED_ERRORS = {"SpectrumReadError", "NoSpectraError", "CompanionFileError"}


def _arrays(spec) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a, dtype=float) for a in (spec.wavelength, spec.flux))


def _identical(got: list, ref: list) -> bool:
    return len(got) == len(ref) and all(
        np.array_equal(a, b, equal_nan=True) for g, r in zip(got, ref, strict=True)
        for a, b in zip(_arrays(g), _arrays(r), strict=True))


def _changed_finite_pixels(spec, ref) -> int:
    """Finite pixels of ``spec`` whose wavelength the unmutated spectrum lacks or whose flux differs there."""
    wl, flux = _arrays(spec)
    rwl, rflux = _arrays(ref)
    keep = np.isfinite(wl) & np.isfinite(flux)
    at = dict(zip(rwl[np.isfinite(rwl)].tolist(), rflux[np.isfinite(rwl)].tolist(), strict=True))
    return sum(1 for w, f in zip(wl[keep].tolist(), flux[keep].tolist(), strict=True) if at.get(w) != f)


def _broken_rule(res: dict, ref: list | None) -> str | None:
    """Why a fuzz result breaks its kind's rule in `EXPECT`, or None."""
    rule = EXPECT[res["kind"]]
    if res["outcome"] == "error":
        if res["error_type"] not in TYPED_ERRORS or not res["named_file"]:
            return f"error {res['error_type']} (naming the file: {res['named_file']})"
        if isinstance(rule, tuple) and rule[1] not in res["reason"]:
            return f"reason {res['reason']!r} lacks {rule[1]!r}"
        return None
    if res["outcome"] != "ok":
        return f"{res['outcome']} {res.get('error', '')}"
    got = res["spectra"]
    if isinstance(rule, tuple):
        return f"read as {len(got)} spectra, expected a typed error"
    if ref is None:
        return "the unmutated file is refused but the mutated one reads"
    if rule == "same" and not _identical(got, ref):
        return "spectra differ from the unmutated file's"
    if isinstance(rule, int):
        if len(got) != len(ref):
            return f"{len(got)} spectra, the unmutated file has {len(ref)}"
        changed = max(_changed_finite_pixels(g, r) for g, r in zip(got, ref, strict=True))
        if changed > rule:
            return f"{changed} finite pixels new or changed (at most {rule})"
    return None


def test_every_kind_has_a_rule():
    assert set(EXPECT) == set(fitsfuzz.KINDS)


def test_fuzzed_files_give_spectra_or_typed_errors(spectra_dir, tmp_path):
    """Each mutated file gives what its kind allows (see `EXPECT`), within `LIMIT_S`."""
    refs: dict = {}

    def reference(path):
        if path not in refs:
            try:
                refs[path] = read_spectra(path)
            except SpectrumReadError:  # e.g. a redrock catalogue: every mutation of it must be refused too
                refs[path] = None
        return refs[path]

    results, broken = [], []
    for case in fitsfuzz.generate(spectra_dir, N_CASES, seed=SEED):
        res = fitsfuzz.run_case(case, tmp_path, read_spectra, SpectrumReadError, timeout_s=LIMIT_S, keep_spectra=True)
        why = _broken_rule(res, reference(case.source))
        res.pop("spectra", None)
        if why:
            broken.append(f"{case.name}: {why}"[:240])
        results.append(res)
    assert len(results) == N_CASES
    outcomes = collections.Counter((r["kind"], r["outcome"]) for r in results)
    assert not broken, f"{len(broken)} of {N_CASES}: " + "; ".join(broken[:8])
    # Both outcomes occur (a mutator that never breaks anything, or a reader that refuses everything, fails here).
    total = collections.Counter(r["outcome"] for r in results)
    assert total["ok"] > N_CASES // 10 and total["error"] > N_CASES // 10, outcomes
    slowest = max(results, key=lambda r: r["seconds"])
    assert slowest["seconds"] < LIMIT_S, slowest


@pytest.mark.parametrize("naxis", [999, 1000, 99999999, 2**31 - 1, -1])
def test_lying_naxis_is_refused_quickly(spectra_dir, tmp_path, naxis):
    """A primary header claiming millions of axes made astropy loop for minutes; it must fail fast and typed.

    999 axes is legal FITS, but the missing NAXISn count as 0: no data, so a typed error too.
    """
    raw = (spectra_dir / "other/emlLinearSkyAirNoHelio.fits").read_bytes()
    data = fitsfuzz.set_card(raw, "NAXIS", str(naxis))
    res = fitsfuzz.run_case(fitsfuzz.Case(f"naxis{naxis}", "lie_naxis", data, ".fits"), tmp_path, read_spectra,
                            SpectrumReadError, timeout_s=LIMIT_S)
    assert res["outcome"] == "error" and res["error_type"] == "SpectrumReadError" and res["named_file"], res
    assert res["seconds"] < LIMIT_S


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
    assert res["outcome"] == "error" and res["error_type"] == "SpectrumReadError" and res["named_file"], res
    assert "1 damaged header (VerifyError: Format 'ZZ' is not recognized.)" in res["reason"], res["reason"]
    assert res["seconds"] < LIMIT_S


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
