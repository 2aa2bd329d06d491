"""Line lists independent of the task (issue #44): the built-in lists with their sources, the user's own file,
and where a marker goes (air/vacuum, redshift, frame)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from speco3.spectra.linelists import (
    MAX_FILE_BYTES,
    Line,
    LineListError,
    builtin_line_lists,
    line_centroid,
    marker_position,
    marker_z,
    read_line_list,
    vac_to_air,
)


def test_builtin_lists_cite_their_source_and_hold_vacuum_lines():
    lists = builtin_line_lists()
    assert {"qso", "galaxy_emission", "galaxy_absorption", "stars_ob", "stars_af", "stars_gk", "stars_m",
            "sky"} <= set(lists)
    for lst in lists.values():
        assert lst.source and lst.title and lst.lines, lst.key
        assert all(900 < ln.wavelength < 10000 and math.isfinite(ln.wavelength) for ln in lst.lines), lst.key
    qso = {ln.name: ln.wavelength for ln in lists["qso"].lines}
    for name in ("Lyα", "C IV", "Mg II", "Hβ", "[O III] 5007", "Hα"):
        assert name in qso
    sky = lists["sky"]  # published in air, kept in vacuum like every Line, and not moved by the redshift
    assert sky.medium == "air" and sky.frame == "observed"
    o1 = next(ln for ln in sky.lines if ln.name.startswith("[O I] 5577"))
    assert vac_to_air(o1.wavelength) == pytest.approx(5577.338, abs=0.005)


def test_marker_position_applies_medium_redshift_and_frame():
    oiii = Line("[O III] 5007", 5008.24)
    z = 0.308
    observed_air = marker_position(oiii, "air", z, z, "observed")
    assert observed_air == pytest.approx(vac_to_air(5008.24) * (1 + z))
    assert marker_position(oiii, "vacuum", z, z, "observed") == pytest.approx(5008.24 * (1 + z))
    assert marker_position(oiii, "unknown", z, z, "rest") == pytest.approx(5008.24)  # unknown medium: vacuum
    assert marker_position(oiii, "vacuum", 0.31, z, "rest") == pytest.approx(5008.24 * 1.31 / 1.308)
    sky = Line("[O I] 5577 sky", 5578.887)
    assert marker_position(sky, "vacuum", 1.0, z, "observed", "observed") == 5578.887  # sky lines stay put
    assert marker_position(sky, "vacuum", 1.0, z, "rest", "observed") == pytest.approx(5578.887 / (1 + z))


def test_own_csv_and_ecsv_files(tmp_path):
    csv = tmp_path / "mine.csv"
    csv.write_text("name,wavelength,kind\nFe II 2600,2600.17,absorption\n  my   line ,6000,whatever\n")
    lst = read_line_list(csv)
    assert lst.frame == "rest" and lst.medium == "vacuum" and lst.title == "mine.csv"
    assert lst.lines == (Line("Fe II 2600", 2600.17, "absorption"), Line("my line", 6000.0, "line"))
    ecsv = tmp_path / "sky.ecsv"
    ecsv.write_text("# %ECSV 1.0\n# ---\n# datatype:\n# - {name: name, datatype: string}\n"
                    "# - {name: wavelength, unit: nm, datatype: float64}\n"
                    "# meta: {medium: air, frame: observed}\n# schema: astropy-2.0\nname wavelength\nOI 557.7338\n")
    lst = read_line_list(ecsv)
    assert lst.frame == "observed" and lst.medium == "air"
    assert vac_to_air(lst.lines[0].wavelength) == pytest.approx(5577.338, abs=1e-3)


@pytest.mark.parametrize("text,says", [
    ("wave_nm,label\n1,2\n", "needs a 'name' and a 'wavelength' column"),
    ("name,wavelength\nx,nan\n", "row 1: wavelength nan"),
    ("name,wavelength\nx,-5\n", "row 1"),
    ("name,wavelength\nx,abc\n", "not a wavelength"),
    ("\x00\x01\x02garbage", "needs a 'name'"),
    ("name,wavelength\nx,1,2,3\n", "not a readable CSV"),
])
def test_bad_files_say_why(tmp_path, text, says):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(LineListError, match=says.replace("(", r"\(").replace("[", r"\[")):
        read_line_list(path)


def test_large_or_missing_files_are_refused(tmp_path):
    big = tmp_path / "big.csv"
    big.write_bytes(b"name,wavelength\n" + b"x,5000\n" * (MAX_FILE_BYTES // 7 + 10))
    with pytest.raises(LineListError, match="too large"):
        read_line_list(big)
    with pytest.raises(LineListError, match="cannot read"):
        read_line_list(tmp_path / "missing.csv")


@pytest.mark.parametrize(("medium", "frame"), [("vacuum", "observed"), ("air", "observed"), ("air", "rest")])
def test_marker_z_inverts_marker_position(medium, frame):
    """A marker dragged to where the line is drawn at z gives z back (air or vacuum, either frame shown)."""
    line = Line("[O III] 5007", 5008.24, "emission")
    for z in (0.0, 0.308, 2.1):
        at = marker_position(line, medium, z, 0.3, frame)
        assert marker_z(line, medium, at, 0.3, frame) == pytest.approx(z, abs=1e-12)


def test_line_centroid_of_emission_and_absorption_lines():
    """The centroid of a Gaussian line over a sloping continuum with noise, to a tenth of a pixel; None for a
    window too small or flat."""
    rng = np.random.default_rng(4)
    w = np.linspace(6400, 6700, 301)  # 1 Å pixels
    cont = 10 + 0.01 * (w - 6400)
    good = np.ones(w.size, dtype=bool)
    emission = cont + 8 * np.exp(-0.5 * ((w - 6551.3) / 3.0) ** 2) + rng.normal(0, 0.1, w.size)
    assert line_centroid(w, emission, good, 6520, 6585, "emission") == pytest.approx(6551.3, abs=0.1)
    assert line_centroid(w, emission, good, 6520, 6585) == pytest.approx(6551.3, abs=0.1)  # kind "line": the larger side
    absorption = cont - 5 * np.exp(-0.5 * ((w - 6600.7) / 4.0) ** 2) + rng.normal(0, 0.1, w.size)
    assert line_centroid(w, absorption, good, 6570, 6630, "absorption") == pytest.approx(6600.7, abs=0.15)
    masked = good.copy()
    masked[150:] = False
    assert line_centroid(w, emission, masked, 6549, 6560) is None  # 0 good pixels in the window
    assert line_centroid(w, cont, good, 6500, 6600, "emission") is None  # a straight continuum: no line


def test_line_centroid_of_the_line_near_its_marker():
    """Two lines in the window (Hα and [N II]): the one nearest the marker counts, else the stronger."""
    w = np.linspace(6900, 7050, 151)
    flux = 5 + 3 * np.exp(-0.5 * ((w - 6966.4) / 3.0) ** 2) + 4 * np.exp(-0.5 * ((w - 6988.3) / 3.0) ** 2)
    good = np.ones(w.size, dtype=bool)
    assert line_centroid(w, flux, good, 6930, 7010, "emission", near=6971.0) == pytest.approx(6966.4, abs=0.2)
    assert line_centroid(w, flux, good, 6930, 7010, "emission") == pytest.approx(6988.3, abs=0.2)
