"""Registry behaviour: content detection, file objects, gzip, addresses, ASCII, and clear errors for bad files."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest
from astropy.io import fits

from speco3.errors import SpectrumReadError
from speco3.spectra import (
    NoSpectraError,
    Spectrum,
    formats,
    identify,
    parse_address,
    read_spectra,
    read_spectrum,
    register_format,
    registry,
)

LRS = "lamost/spec-55859-F5902_sp01-001.fits.gz"
SDSS = "sdss/spec-0266-51602-0638.fits"


def test_formats_lists_survey_layouts_before_generic_fallbacks():
    names = formats()
    for name in ("lamost-lrs", "lamost-lrs-old", "lamost-mrs", "sdss-spec", "sdss-spspec", "desi",
                 "generic-image", "generic-table", "ascii", "iraf-multispec", "aaomega-2df"):
        assert name in names
    assert names.index("sdss-spec") < names.index("generic-table") < names.index("ascii")


def test_detection_ignores_the_file_name(spectra_path, tmp_path):
    renamed = tmp_path / "notes.txt"
    renamed.write_bytes(spectra_path(SDSS).read_bytes())
    assert identify(renamed) == "sdss-spec"
    gz_no_suffix = tmp_path / "plain.fits"
    gz_no_suffix.write_bytes(spectra_path(LRS).read_bytes())  # gzip content, .fits name
    assert read_spectra(gz_no_suffix)[0].meta.object_id == "101001"


def test_file_objects_and_gzip(spectra_path):
    by_path = read_spectra(spectra_path(SDSS))[0]
    with open(spectra_path(SDSS), "rb") as fh:
        by_fh = read_spectra(fh)[0]
    np.testing.assert_array_equal(by_path.flux, by_fh.flux)
    assert by_fh.meta.object_id == by_path.meta.object_id
    packed = io.BytesIO(gzip.compress(spectra_path(SDSS).read_bytes()))
    by_gz = read_spectrum(packed)
    np.testing.assert_array_equal(by_gz.wavelength, by_path.wavelength)
    assert by_gz.meta.path is None and by_gz.meta.redshift == pytest.approx(0.1098, abs=1e-4)


def test_addresses(spectra_path):
    path = spectra_path("desi/coadd-sv3-dark-26065.fits")
    assert parse_address(f"{path}#2") == (str(path), "2")
    assert parse_address(str(path)) == (str(path), None)
    second = read_spectrum(f"{path}#1")
    assert second.meta.index == 1 and second.meta.object_id == "616088619186127404"
    by_id = read_spectrum(f"{path}#39627866878514741")
    assert by_id.meta.index == 2
    assert read_spectrum(path, index=2).meta.object_id == "39627866878514741"
    mrs = spectra_path("lamost/med-58625-TD192102N424113K01_sp12-076.fits.gz")
    assert read_spectrum(f"{mrs}#COADD_R").meta.index == 1
    with pytest.raises(SpectrumReadError, match=r"no spectrum '7': the file holds 3 spectra") as err:
        read_spectrum(f"{path}#7")
    assert err.value.path.endswith("coadd-sv3-dark-26065.fits#7")
    assert read_spectrum(path).name == "coadd-sv3-dark-26065.fits#0"


def test_hash_in_a_real_file_name_is_not_an_address(spectra_path, tmp_path):
    odd = tmp_path / "odd#1.fits"
    odd.write_bytes(spectra_path(SDSS).read_bytes())
    assert parse_address(str(odd)) == (str(odd), None)
    assert read_spectrum(str(odd)).meta.file_name == "odd#1.fits"


def test_truncated_fits_names_the_file(spectra_path, tmp_path):
    bad = tmp_path / "cut.fits"
    data = spectra_path(SDSS).read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(SpectrumReadError, match="truncated") as err:
        read_spectra(bad)
    assert err.value.path == str(bad)


def test_truncated_gzip(spectra_path, tmp_path):
    bad = tmp_path / "cut.fits.gz"
    data = spectra_path(LRS).read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(SpectrumReadError, match="truncated gzip"):
        read_spectra(bad)


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "empty file"),
    (bytes(range(256)) * 20, "not a FITS file and not text"),
    (b"SIMPLE  = this is not a header" + b"\x00" * 100, "corrupt FITS"),
    (b"Dear colleague,\nplease find the spectrum attached.\n", "unknown layout: text file"),
    (b"1,2,3,4,5\n2,3,4,5,6\n3,4,5,6,7\n", "5 numeric columns and no header"),
])
def test_bad_files(tmp_path, content, reason):
    p = tmp_path / "bad.fits"
    p.write_bytes(content)
    with pytest.raises(SpectrumReadError, match=reason) as err:
        read_spectra(p)
    assert err.value.path == str(p)


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(SpectrumReadError, match="file not found"):
        read_spectra(tmp_path / "nope.fits")
    with pytest.raises(SpectrumReadError, match="is a folder"):
        read_spectra(tmp_path)


def test_unknown_fits_layout_lists_hdus(tmp_path):
    p = tmp_path / "image.fits"
    fits.HDUList([fits.PrimaryHDU(np.zeros((64, 64), np.float32)),
                  fits.BinTableHDU.from_columns([fits.Column("A", "E", array=np.ones(3))], name="STUFF")]).writeto(p)
    with pytest.raises(SpectrumReadError, match=r"unknown layout: HDUs found: 0 'PRIMARY' image 64x64; "
                                                r"1 'STUFF' table 3 rows \[A\]"):
        read_spectra(p)


def test_wrong_shapes_in_a_known_layout(tmp_path):
    p = tmp_path / "lamost.fits"
    hdr = fits.Header({"TELESCOP": "LAMOST", "DATA_V": "LAMOST DR9", "OBSID": 5})
    cols = [fits.Column("FLUX", "100E", array=np.ones((1, 100))), fits.Column("IVAR", "100E", array=np.ones((1, 100))),
            fits.Column("WAVELENGTH", "90E", array=np.linspace(4000, 5000, 90)[None])]
    fits.HDUList([fits.PrimaryHDU(header=hdr), fits.BinTableHDU.from_columns(cols, name="COADD")]).writeto(p)
    with pytest.raises(SpectrumReadError, match="wrong shapes: flux has 100 values, wavelength 90"):
        read_spectra(p)


def test_redrock_file_is_a_catalogue_not_a_spectrum(spectra_path):
    with pytest.raises(NoSpectraError, match="redrock catalogue"):
        read_spectra(spectra_path("desi/redrock-4-80613-thru20210324.fits"))


def test_ascii_csv_with_units_and_whitespace_text(tmp_path):
    csv = tmp_path / "s.csv"
    csv.write_text("# my spectrum\nwavelength_nm,flux,err\n400.0,1.0,0.5\n400.1,2.0,0\n400.2,3.0,0.25\n")
    s = read_spectrum(csv)
    assert identify(csv) == "ascii"
    np.testing.assert_allclose(s.wavelength, [4000, 4001, 4002])
    np.testing.assert_allclose(s.ivar, [4.0, 0.0, 16.0])
    assert s.mask.tolist() == [False, True, False]
    txt = tmp_path / "s.txt"
    txt.write_text("6000 1.5\n5999 1.0\n6001 2.0\n")
    t = read_spectrum(txt)
    assert t.wavelength.tolist() == [5999, 6000, 6001] and t.flux.tolist() == [1.0, 1.5, 2.0] and t.ivar is None


def test_register_format_takes_priority(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "_FORMATS", dict(registry._FORMATS))
    registry._load_builtins()
    p = tmp_path / "x.spec"
    p.write_text("MYFORMAT\n")

    def ident(src):
        return src.text is not None and src.text.startswith("MYFORMAT")

    def read(src):
        return [Spectrum(np.array([1.0, 2.0]), np.array([3.0, 4.0]))]

    register_format("my-format", ident, read, priority=1000)
    assert formats()[0] == "my-format"
    s = read_spectrum(p)
    assert s.meta.format == "my-format" and s.meta.file_name == "x.spec"


def test_reader_bug_becomes_a_read_error(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "_FORMATS", dict(registry._FORMATS))
    p = tmp_path / "y.spec"
    p.write_text("BROKEN\n")

    def read(src):
        raise KeyError("FLUX")

    register_format("broken", lambda src: src.text == "BROKEN\n", read, priority=1000)
    with pytest.raises(SpectrumReadError, match=r"broken layout could not be read: KeyError: 'FLUX'"):
        read_spectra(p)


@pytest.mark.parametrize("rel", [SDSS, LRS, "desi/coadd-4-80613-thru20210324.fits", "generic/UM184_nF.fits",
                                 "lamost/med-58625-TD192102N424113K01_sp12-076.fits.gz", "other/odbue5030_x1d.fits"])
def test_damaged_copies_fail_cleanly(spectra_path, tmp_path, rel):
    """A cut copy of a real file is refused with SpectrumReadError naming the file (it ends before the data its
    headers declare); a byte-flipped copy either reads as valid spectra or is refused the same way."""
    data = spectra_path(rel).read_bytes()
    rng = np.random.default_rng(len(data))
    cuts = [data[:cut] for cut in (2880, 5760, len(data) // 2, len(data) - 2880, len(data) - 7)]
    flips = []
    for _ in range(6):
        b = bytearray(data)
        pos = rng.integers(0, min(len(b), 20000), 8)
        for p in pos:
            b[p] = int(rng.integers(0, 256))
        flips.append(bytes(b))
    for k, blob in enumerate(cuts):
        p = tmp_path / f"cut{k}.fits"
        p.write_bytes(blob)
        with pytest.raises(SpectrumReadError) as err:
            read_spectra(p)
        assert err.value.path == str(p) and err.value.reason, f"cut at {len(blob)} of {len(data)} bytes"
    for k, blob in enumerate(flips):
        p = tmp_path / f"flipped{k}.fits"
        p.write_bytes(blob)
        try:
            specs = read_spectra(p)
        except SpectrumReadError as exc:
            assert exc.path == str(p) and exc.reason
        else:
            assert specs and all(s.n_pixels > 0 for s in specs)


def test_desi_wrong_shapes(tmp_path):
    p = tmp_path / "coadd-x.fits"
    fm = fits.BinTableHDU.from_columns([fits.Column("TARGETID", "K", array=np.array([5, 6]))], name="FIBERMAP")
    hdus = [fits.PrimaryHDU(), fm, fits.ImageHDU(np.linspace(3600, 3608, 10), name="B_WAVELENGTH"),
            fits.ImageHDU(np.ones((2, 12), np.float32), name="B_FLUX"),
            fits.ImageHDU(np.ones((2, 12), np.float32), name="B_IVAR")]
    fits.HDUList(hdus).writeto(p)
    assert identify(p) == "desi"
    with pytest.raises(SpectrumReadError, match="wrong shapes: B_FLUX has 12 pixels, B_WAVELENGTH 10") as err:
        read_spectra(p)
    assert not isinstance(err.value, NoSpectraError)


def test_fast_header_values_match_astropy(spectra_dir):
    """Header values decoded from raw cards equal astropy's for every card of every shared file's HDU 0 and 1."""
    import warnings

    from speco3.spectra.source import FastHeader

    checked = 0
    for path in sorted(spectra_dir.rglob("*.fit*")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with fits.open(path) as hdul:
                for hdu in list(hdul)[:2]:
                    fast = FastHeader.from_hdu(hdu)
                    for key, value in fast.items():
                        try:
                            expected = hdu.header[key]
                        except (fits.VerifyError, ValueError, KeyError):
                            continue
                        if isinstance(expected, float):
                            assert value == pytest.approx(expected, rel=1e-12), (path.name, key)
                        elif isinstance(expected, str):
                            assert value == expected.rstrip(), (path.name, key)
                        else:
                            assert value == expected, (path.name, key)
                        checked += 1
    assert checked > 3000


def test_zero_length_data_is_no_spectrum(spectra_path, tmp_path):
    """A 1D image whose data were cut to zero length is refused, never read as a 0-pixel spectrum: by our readers
    (no layout has an empty image) and by the specutils fallback when it is on (its reader returns 0 pixels)."""
    from speco3.spectra.specutils_io import fallback_enabled

    with fits.open(spectra_path("generic/PH957_f.fits")) as hdul:
        hdul[0].data = np.zeros((0,), dtype=np.float32)
        hdul.writeto(tmp_path / "zero.fits")
    with pytest.raises(SpectrumReadError, match=r"unknown layout: HDUs found: 0 'PRIMARY' image 0") as err:
        read_spectra(tmp_path / "zero.fits")
    assert err.value.path == str(tmp_path / "zero.fits")
    with fallback_enabled(), pytest.raises(NoSpectraError, match=r"no pixels: zero-length data") as err:
        read_spectra(tmp_path / "zero.fits")
    assert err.value.path == str(tmp_path / "zero.fits")


def test_threads_reading_while_the_builtin_formats_load_all_see_every_format(monkeypatch):
    """`vet --concurrency` reads from several threads: one that arrives while another is registering the built-in
    formats must wait for the whole set (a half-filled registry called a DESI coadd an unknown layout)."""
    import importlib
    import threading
    import time

    from speco3.spectra import registry
    from speco3_testkit.testdata import SPECTRA

    formats_mod = importlib.import_module("speco3.spectra.formats")  # the package (speco3.spectra.formats is a function)
    real_load_all = formats_mod.load_all
    started = threading.Event()

    def slow_load_all(register):
        def slow_register(*args, **kwargs):
            started.set()
            time.sleep(0.02)  # a registration in progress, as a thread switch mid-load would leave it
            register(*args, **kwargs)

        real_load_all(slow_register)

    monkeypatch.setattr(formats_mod, "load_all", slow_load_all)
    monkeypatch.setattr(registry, "_FORMATS", {})
    monkeypatch.setattr(registry, "_BUILTINS_LOADED", False)
    desi = SPECTRA / "desi" / "coadd-4-80613-thru20210324.fits"
    results: dict[str, object] = {}

    def first():
        registry.formats()

    def second():
        started.wait(10)
        try:
            results["spectra"] = read_spectra(desi)
        except Exception as exc:  # the failure this test guards against
            results["error"] = exc

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert "error" not in results, results.get("error")
    assert results["spectra"], "the DESI coadd read as no spectra"
