"""Hostile and unlucky input from files and stores (#42, part 1): decompression bombs, numbers at the edges of
float64, paths that leave their folder, exports onto the store, malformed task files and store columns, read-only
places. Every case must end in a clear, specific message within bounded time and memory, and never destroy data.

Bombs are generated at test time (a few MB on disk at most) and read in a child process that reports its own time,
``tracemalloc`` peak and RSS growth (Linux: ``VmHWM`` after resetting it), so that a regression shows as a number, not as a machine out of memory. The
bounds are generous (the work is ~0.05 s and a few MB; the unbounded reader took 61 s and 17.9 GB), so that a
loaded two-core runner passes while a reader that decompresses the bomb still fails them by orders of magnitude.
"""

from __future__ import annotations

import base64
import bz2
import contextlib
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from astropy.io import fits

from speco3.agent.tasks import load_task_file, load_tasks
from speco3.cli import main
from speco3.errors import SpectrumReadError, TaskError
from speco3.spectra import ArchiveIndex, read_spectra, read_spectrum
from speco3.spectra.model import Spectrum
from speco3.vetting import VettingStore
from speco3_testkit.readonly import read_only_folder

GiB = 1 << 30
MiB = 1 << 20
REAL_GZ = "lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz"
NO = json.dumps(["<answer>\\boxed{NO}</answer>"])

# Bounds of one bomb read in the child (see the module doc): measured 0.03 s and < 3 MB traced on a quiet machine.
BOMB_SECONDS = 5.0
BOMB_TRACED_BYTES = 32 * MiB
BOMB_RSS_GROWTH = 200 * MiB

_CHILD = r"""
import json, os, sys, time, tracemalloc
from speco3.errors import SpectrumReadError
from speco3.spectra import read_spectra

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key))

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from the current RSS: what the imports cost is not counted
base = status("VmRSS")
tracemalloc.start()
t0 = time.perf_counter()
try:
    n, error = len(read_spectra(sys.argv[1])), None
except SpectrumReadError as exc:
    n, error = 0, exc.reason
seconds = time.perf_counter() - t0
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"spectra": n, "error": error, "seconds": seconds, "traced": peak,
                  "rss_growth": status("VmHWM") - base}))
"""


def read_in_child(path: Path, limit_mb: float | None = None) -> dict:
    env = dict(os.environ)
    if limit_mb is not None:
        env["SPECO3_MAX_DECOMPRESSED_MB"] = str(limit_mb)
    res = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def fits_header(naxis1: int = 100, bitpix_dtype=np.float32) -> bytes:
    return fits.PrimaryHDU(np.zeros(naxis1, dtype=bitpix_dtype)).header.tostring().encode("ascii")


def gzip_bomb(path: Path, total: int, head: bytes) -> Path:
    """``head`` then zeros up to ``total`` bytes, as gzip members of 1 MiB zeros each (~1 kB on disk per MiB)."""
    zeros = gzip.compress(bytes(MiB), 9)
    with open(path, "wb") as f:
        f.write(gzip.compress(head, 9))
        for _ in range(total // MiB):
            f.write(zeros)
    return path


def assert_bounded(res: dict) -> None:
    assert res["seconds"] < BOMB_SECONDS, res
    assert res["traced"] < BOMB_TRACED_BYTES, res
    assert res["rss_growth"] < BOMB_RSS_GROWTH, res


# -- 1. bounded reading ------------------------------------------------------------------------------------
def test_gzip_bomb_of_4_gib_fails_fast_and_small(tmp_path):
    bomb = gzip_bomb(tmp_path / "bomb.fits.gz", 4 * GiB, fits_header())
    assert bomb.stat().st_size < 6 * MiB
    res = read_in_child(bomb)
    assert res["spectra"] == 0 and "decompression bomb" in res["error"], res
    assert "its FITS headers declare" in res["error"]
    assert_bounded(res)


def test_single_stream_gzip_bomb_stops_after_the_declared_content(tmp_path):
    co = zlib.compressobj(1, zlib.DEFLATED, 31)  # one gzip member: the stream itself must be cut, not the file
    path = tmp_path / "one.fits.gz"
    with open(path, "wb") as f:
        f.write(co.compress(fits_header()))
        for _ in range(64):
            f.write(co.compress(bytes(MiB)))
        f.write(co.flush())
    res = read_in_child(path)
    assert "decompression bomb" in res["error"], res
    assert res["traced"] < 8 * MiB, res  # stopped near 1 MB past the header, not at 64 MB


def test_bzip2_bomb_fails_fast_and_small(tmp_path):
    path = tmp_path / "bomb.fits.bz2"
    zeros = bz2.compress(bytes(8 * MiB), 9)
    with open(path, "wb") as f:
        f.write(bz2.compress(fits_header() + bytes(8 * MiB), 9))
        for _ in range(4 * GiB // (8 * MiB)):
            f.write(zeros)
    assert path.stat().st_size < MiB
    res = read_in_child(path)
    assert "bzip2 stream expands past" in res["error"], res
    assert_bounded(res)


def test_header_declaring_more_than_the_ceiling_is_refused_from_the_header(tmp_path):
    header = fits.Header({"SIMPLE": True, "BITPIX": 8, "NAXIS": 1, "NAXIS1": 4 * GiB})
    path = tmp_path / "huge.fits.gz"
    path.write_bytes(gzip.compress(header.tostring().encode("ascii") + bytes(2880)))
    res = read_in_child(path)
    assert "HDU 0 declares 4096 MB of data, over the 1024 MB read limit" in res["error"], res
    assert "SPECO3_MAX_DECOMPRESSED_MB" in res["error"]
    assert_bounded(res)


def test_tile_compressed_image_declaring_too_much_is_refused(tmp_path):
    from speco3_testkit import fitsfuzz

    buf = tmp_path / "small.fits.fz"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(np.zeros((64, 64), dtype=np.float32))]).writeto(buf)
    raw = fitsfuzz.set_card(buf.read_bytes(), "ZNAXIS1", "2000000000")
    path = tmp_path / "huge.fits.fz"
    path.write_bytes(raw)
    with pytest.raises(SpectrumReadError, match="tile-compressed image, over the 1024 MB read limit"):
        read_spectra(path)


def test_nested_compression_is_refused(spectra_dir, tmp_path):
    path = tmp_path / "twice.fits.gz"
    path.write_bytes(gzip.compress((spectra_dir / REAL_GZ).read_bytes()))  # gzip inside gzip
    with pytest.raises(SpectrumReadError, match="only one layer of compression"):
        read_spectra(path)
    bz = tmp_path / "mixed.fits.gz"
    bz.write_bytes(gzip.compress(bz2.compress(b"SIMPLE  = T" + bytes(4000))))
    with pytest.raises(SpectrumReadError, match="only one layer of compression"):
        read_spectra(bz)


def test_the_limit_is_configurable_and_real_files_read_under_a_small_one(spectra_dir, tmp_path):
    res = read_in_child(spectra_dir / REAL_GZ, limit_mb=4)
    assert res == {**res, "spectra": 1, "error": None}
    text = tmp_path / "big.csv.gz"  # a text bomb: the text limit is a quarter of the ceiling
    text.write_bytes(gzip.compress(b"wavelength,flux\n" + b"4000.0,1.0\n" * 400_000))
    res = read_in_child(text, limit_mb=4)
    assert "more than 1 MB of non-FITS data" in res["error"], res


def test_concatenated_members_and_padding_still_read(spectra_dir, tmp_path):
    raw = gzip.decompress((spectra_dir / REAL_GZ).read_bytes())
    path = tmp_path / "members.fits.gz"
    path.write_bytes(gzip.compress(raw[:10000]) + gzip.compress(raw[10000:]) + bytes(512))
    ref = read_spectrum(spectra_dir / REAL_GZ)
    got = read_spectrum(path)
    assert np.array_equal(got.flux, ref.flux, equal_nan=True)
    path.write_bytes(gzip.compress(raw) + b"garbage after the stream")
    with pytest.raises(SpectrumReadError, match="other data after its end"):
        read_spectra(path)


def test_indexer_reads_bombs_in_parallel_within_the_limit(spectra_dir, tmp_path):
    """24 files (the pool threshold) of which 20 are 1-GiB bombs: two worker processes, each with half the limit;
    the bombs are error rows and the real files are indexed. The children's peak RSS stays bounded."""
    archive = tmp_path / "archive"
    archive.mkdir()
    bomb = gzip_bomb(tmp_path / "b.fits.gz", GiB, fits_header()).read_bytes()
    for i in range(20):
        (archive / f"bomb{i:02d}.fits.gz").write_bytes(bomb)
    for i in range(4):
        (archive / f"real{i}.fits.gz").write_bytes((spectra_dir / REAL_GZ).read_bytes())
    code = r"""
import json, resource, sys
from speco3.spectra import ArchiveIndex
with ArchiveIndex(sys.argv[2]) as index:
    s = index.scan(sys.argv[1], workers=2)
print(json.dumps({"errors": s.errors, "spectra": s.spectra_written, "seconds": s.seconds,
                  "children_maxrss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
"""
    res = subprocess.run([sys.executable, "-c", code, str(archive), str(tmp_path / "i.sqlite")],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["errors"] == 20 and out["spectra"] == 4, out
    assert out["children_maxrss"] < 400 * MiB, out  # a worker process with astropy loaded is ~150 MB
    with ArchiveIndex(tmp_path / "i.sqlite") as index:
        assert all("decompression bomb" in e.error for e in index.errors())


# -- 2. numbers at the edges -------------------------------------------------------------------------------
def write_image_spectrum(path: Path, flux) -> Path:
    hdu = fits.PrimaryHDU(np.asarray(flux, dtype=np.float64))
    hdu.header.update({"CRVAL1": 3800.0, "CDELT1": 2.0, "CRPIX1": 1.0, "CTYPE1": "WAVE", "CUNIT1": "Angstrom"})
    hdu.writeto(path)
    return path


def noisy(n: int = 2000) -> np.ndarray:
    return 1 + 0.1 * np.random.default_rng(1).standard_normal(n)


def test_overflowing_flux_is_masked_with_a_note_at_read_time(tmp_path):
    flux = noisy()
    flux[500:600] = 1e308
    flux[700] = -np.finfo(float).max
    spec = read_spectrum(write_image_spectrum(tmp_path / "some.fits", flux))
    assert np.isnan(spec.flux[500:600]).all() and np.isnan(spec.flux[700]) and spec.mask[500:600].all()
    assert "101 pixels with values beyond ±1e+150 masked (overflow)" in spec.meta.note
    keep = np.ones(flux.size, dtype=bool)
    keep[500:600] = keep[700] = False
    assert np.array_equal(spec.flux[keep], flux[keep])  # every other value exactly as stored
    flux[:] = 1e308
    spec = read_spectrum(write_image_spectrum(tmp_path / "all.fits", flux))
    assert spec.is_empty and "empty spectrum" in spec.meta.note


EXTREMES = {
    "1e308": np.full(300, 1e308),
    "±max": np.linspace(-1.0, 1.0, 300) * np.finfo(float).max,
    "subnormal": np.linspace(5e-324, 1e-320, 300),
    "flat": np.ones(300),
    "zeros": np.zeros(300),
    "one spike at 1e308": np.r_[np.ones(299), 1e308],
    "limit": np.linspace(-1e150, 1e150, 300),
}


@pytest.mark.parametrize("name", list(EXTREMES))
@pytest.mark.parametrize("axis", ["flux", "wavelength"])
def test_render_never_fails_on_finite_extremes(name, axis):
    from speco3.render import render_arrays

    values = EXTREMES[name]
    other = np.linspace(4000.0, 9000.0, values.size) if axis == "flux" else np.sin(np.arange(values.size))
    x, y = (other, values) if axis == "flux" else (np.sort(values), other)
    for zoom in (False, True):
        img = render_arrays(x, y, f"{axis} {name}", zoom, wavelength_range=(4000.0, 5000.0) if zoom else None)
        assert img.width > 100 and img.height > 100
        assert all(np.isfinite(v) for v in (*img.x_range, *img.y_range)), (img.x_range, img.y_range)


def test_viewer_ranges_stay_finite_on_extremes(qtbot):
    from speco3.gui.viewer import SpectrumViewer

    viewer = SpectrumViewer()
    qtbot.addWidget(viewer)
    wave = np.linspace(4000.0, 9000.0, 300)
    for name, flux in EXTREMES.items():  # built directly, as a plug-in or a notebook would: nothing masked
        viewer.set_spectrum(Spectrum(wave, flux))
        lo, hi = viewer.y_range()
        assert np.isfinite(lo) and np.isfinite(hi) and hi > lo, name
        xlo, xhi = viewer.x_range()
        assert np.isfinite(xlo) and np.isfinite(xhi) and xhi > xlo, name
    viewer.set_spectrum(Spectrum(np.full(300, 5000.0), noisy(300)))  # one wavelength for every pixel
    xlo, xhi = viewer.x_range()
    assert xlo < 5000.0 < xhi


@pytest.fixture
def edge_archive(tmp_path) -> Path:
    """Six spectra, three of them at the edges of float64, in file-name order (vet screens in this order)."""
    arch = tmp_path / "arch"
    arch.mkdir()
    flux = noisy()
    write_image_spectrum(arch / "a_good.fits", flux)
    some = flux.copy()
    some[500:600] = 1e308
    write_image_spectrum(arch / "b_some_1e308.fits", some)
    write_image_spectrum(arch / "c_all_1e308.fits", np.where(np.arange(flux.size) % 2, 1e308, -1.7e308))
    write_image_spectrum(arch / "d_flat.fits", np.ones(flux.size))
    write_image_spectrum(arch / "e_subnormal.fits", np.full(flux.size, 5e-324) * np.arange(flux.size))
    write_image_spectrum(arch / "f_good.fits", flux[::-1])
    return arch


def test_vet_screens_past_bad_spectra_and_render_draws_them(edge_archive, tmp_path, capsys):
    """With the real Qt renderer: main died at b_some_1e308 (IndexError in the ticks) and every rerun with it."""
    script = tmp_path / "no.json"
    script.write_text(NO)
    store = tmp_path / "r.sqlite"
    rc = main(["vet", str(edge_archive), "--task", "cv", "--out", str(store), "--scripted", str(script),
               "--include-unusable"])
    assert rc == 0
    with VettingStore(store, readonly=True) as s:
        outcomes = {Path(v.spectrum_key.split("#")[0]).name: v.outcome for v in s.model_verdicts("cv")}
    assert outcomes == {"a_good.fits": "NO", "b_some_1e308.fits": "NO", "c_all_1e308.fits": "input_error",
                        "d_flat.fits": "NO", "e_subnormal.fits": "NO", "f_good.fits": "NO"}
    for name in ("b_some_1e308.fits", "d_flat.fits", "e_subnormal.fits"):
        assert main(["render", str(edge_archive / name), "--out", str(tmp_path / f"{name}.png")]) == 0
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()


# -- 3. paths from data stay in their folder -----------------------------------------------------------------
@pytest.fixture
def vetted(edge_archive, tmp_path) -> tuple[Path, Path]:
    """A store and its trace folder from a real scripted `vet` run: (store, traces)."""
    script = tmp_path / "no.json"
    script.write_text(NO)
    store, traces = tmp_path / "v.sqlite", tmp_path / "v_traces"
    assert main(["vet", str(edge_archive), "--task", "cv", "--out", str(store), "--scripted", str(script),
                 "--traces", str(traces), "--limit", "1"]) == 0
    return store, traces


SECRET = b"\x89PNG\r\n\x1a\nsecret-key-material-that-must-not-leave-the-machine"


def test_trace_images_outside_their_folder_or_not_png_are_never_embedded(vetted, tmp_path, capsys):
    store, traces = vetted
    trace_json = next(traces.rglob("trace.json"))
    folder = trace_json.parent
    outside = tmp_path / "secret.png"
    outside.write_bytes(SECRET)
    (folder / "link.png").symlink_to(outside)
    (folder / "notes.png").write_bytes(b"not a PNG at all")
    data = json.loads(trace_json.read_text(encoding="utf-8"))
    image = next(s["image"] for s in data["steps"] if s.get("image"))
    good_name = image["file"]
    cases = ((str(outside), "is an absolute path"), ("../../secret.png", "leads out of its folder (&#39;..&#39;)"),
             ("link.png", "leads out of its folder (a symbolic link"), ("notes.png", "not a PNG file"),
             (good_name, None))
    for i, (name, why) in enumerate(cases):
        image["file"] = name
        trace_json.write_text(json.dumps(data), encoding="utf-8")
        for copy in (False, True):
            report = tmp_path / f"report{i}{'-copied' if copy else ''}.html"
            argv = ["export", str(store), "--html", str(report)] + (["--copy-images"] if copy else [])
            assert main(argv) == 0
            html = report.read_text(encoding="utf-8")
            beside = report.with_name(report.stem + "_files")
            copied = b"".join(p.read_bytes() for p in beside.rglob("*")) if beside.is_dir() else b""
            assert b"secret-key-material" not in html.encode() + copied
            assert base64.b64encode(SECRET).decode()[:20] not in html
            if why is None:  # the trace's own PNG is still shown
                assert (b"\x89PNG" in copied) if copy else ("data:image/png;base64," in html)
            else:
                assert why in html and "image" in html, (name, why)
                assert not copied and "data:image/png;base64," not in html
    capsys.readouterr()


def test_contained_refuses_every_way_out(tmp_path):
    from speco3.fileio import contained

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "ok.png").write_bytes(b"x")
    (tmp_path / "in" / "out").symlink_to(tmp_path)
    assert contained(tmp_path / "in", "ok.png") == (tmp_path / "in" / "ok.png").resolve()
    for bad in ("/etc/passwd", "../x", "a/../../x", "out/x", "C:\\x", "..\\x", "", "a\x00b"):
        with pytest.raises(ValueError):
            contained(tmp_path / "in", bad)


# -- 4. writes never destroy ----------------------------------------------------------------------------------
def test_export_never_overwrites_the_store_and_asks_for_force(vetted, tmp_path, capsys):
    store, _ = vetted
    before = store.read_bytes()
    link = tmp_path / "alias.sqlite"
    link.symlink_to(store)
    hard = tmp_path / "hard.sqlite"
    os.link(store, hard)
    spellings = [str(store), f"{store.parent}/./{store.name}", str(link), str(hard)]
    for target in spellings:
        for fmt in ("--csv", "--votable", "--fits"):
            assert main(["export", str(store), fmt, target, "--force"]) == 1
            err = capsys.readouterr().err
            assert "is the vetting store being exported; refusing to overwrite it" in err, (target, fmt, err)
    assert main(["export", str(store), "--html", str(store), "--force"]) == 0  # a report is always NAME.html
    assert Path(f"{store}.html").is_file()
    as_html = tmp_path / "store.html"  # a store whose name is a report's
    os.link(store, as_html)
    assert main(["export", str(as_html), "--html", str(as_html), "--force"]) == 1
    assert "refusing to overwrite it" in capsys.readouterr().err
    assert store.read_bytes() == before
    with VettingStore(store, readonly=True) as s:
        assert len(s.model_verdicts("cv")) == 1
    csv = tmp_path / "out.csv"
    csv.write_text("someone's file\n")
    assert main(["export", str(store), "--csv", str(csv)]) == 1
    assert "already exists; give --force to replace it" in capsys.readouterr().err
    assert csv.read_text() == "someone's file\n"
    assert main(["export", str(store), "--csv", str(csv), "--force"]) == 0
    assert csv.read_text().startswith("spectrum_key") or "spectrum_key" in csv.read_text()
    # one bad target of several: nothing is written (every target is checked first)
    fresh = tmp_path / "fresh.vot"
    assert main(["export", str(store), "--votable", str(fresh), "--csv", str(csv)]) == 1
    assert not fresh.exists()


# -- 5. task files and store contents ---------------------------------------------------------------------
BAD_TASKS = {
    "deep_list.json": ("[" * 100_000, "nested too deeply"),
    "deep_object.json": ('{"a":' * 100_000, "nested too deeply"),
    "deep_but_parsable.json": ('{"id": "x", "target_class": "CV", "extra": ' + "[" * 200 + "]" * 200 + "}",
                               "nested more than 16 levels"),
    "huge.json": (" " * (1 << 20) + "{}", "too large for a task file"),
    "id_list.json": ('{"id": ["cv"], "target_class": "CV"}', "field 'id' must be a non-empty string"),
    "lines_dict.json": ('{"id": "t", "target_class": "CV", "question": "q?", "lines": {"a": 1}}',
                        "field 'lines' must be a list"),
    "lora_number.json": ('{"id": "t2", "target_class": "CV", "question": "q?", "lora": 5}', "field 'lora'"),
    "latin1.json": (b'{"id": "t3", "target_class": "\xe9"}', "not valid JSON"),
}


def test_malformed_task_files_are_bad_with_a_reason_and_skipped(tmp_path, capsys, caplog):
    folder = tmp_path / "tasks"
    folder.mkdir()
    for name, (text, _why) in BAD_TASKS.items():
        (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    for name, (_text, why) in BAD_TASKS.items():
        with pytest.raises(TaskError, match=why.replace("(", r"\(").replace(")", r"\)")) as info:
            load_task_file(folder / name)
        assert name in str(info.value)
    errors: list[TaskError] = []
    tasks = load_tasks(folder, errors=errors)
    assert "cv" in tasks and len(errors) == len(BAD_TASKS)  # the built-in tasks, every bad file skipped
    assert sorted(e.path.name for e in errors) == sorted(BAD_TASKS)
    assert main(["tasks", "validate", *(str(folder / n) for n in BAD_TASKS)]) == 1
    out = capsys.readouterr().out
    for name, (_text, why) in BAD_TASKS.items():
        line = next(ln for ln in out.splitlines() if name in ln)
        assert line.startswith("BAD") and why in line, line


@pytest.mark.parametrize(("table", "column", "value", "what"), [
    ("model_verdicts", "engine_settings", "{bad", "not valid JSON"),
    ("model_verdicts", "engine_settings", "[" * 100_000, "nested too deeply"),
    ("model_verdicts", "engine_settings", "[1, 2]", "expected a JSON object"),
    ("decisions", "flags", "{", "not valid JSON"),
    ("decisions", "evidence", '[["a"]]', "not a list of [lo, hi, label] windows"),
])
def test_damaged_store_json_is_one_line_and_a_failure(vetted, tmp_path, capsys, table, column, value, what):
    store, _ = vetted
    with VettingStore(store) as s:
        key = s.model_verdicts("cv")[0].spectrum_key
        assert main(["decide", str(store), key, "--task", "cv", "--verdict", "yes"]) == 0
    db = sqlite3.connect(store)
    db.execute(f"UPDATE {table} SET {column}=?", (value,))
    db.commit()
    db.close()
    capsys.readouterr()
    for argv in (["export", str(store), "--csv", str(tmp_path / "x.csv")], ["queue", str(store), "--task", "cv"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"{table} row" in err and f"column {column}" in err and what in err, err


# -- 9. read-only places --------------------------------------------------------------------------------------
def test_vet_out_in_a_read_only_folder_names_it(edge_archive, tmp_path, capsys):
    script = tmp_path / "no.json"
    script.write_text(NO)
    ro = tmp_path / "ro"
    with read_only_folder(ro) as how:
        for out in (ro / "new.sqlite", ro / "sub" / "new.sqlite"):
            rc = main(["vet", str(edge_archive), "--task", "cv", "--out", str(out), "--scripted", str(script)])
            err = capsys.readouterr().err
            assert rc == 1 and "cannot write the vetting store there" in err and str(ro) in err, (how, err)
            assert "read-only" in err and "unable to open database file" not in err


def test_a_store_on_a_read_only_file_system_exports(vetted, tmp_path, capsys):
    store, _ = vetted
    ro = tmp_path / "ro"
    with read_only_folder(ro, fill=lambda d: (d / "copy.sqlite").write_bytes(store.read_bytes())):
        assert main(["export", str(ro / "copy.sqlite"), "--csv", str(tmp_path / "from-ro.csv")]) == 0
    assert "a_good.fits" in (tmp_path / "from-ro.csv").read_text()
    capsys.readouterr()


@pytest.mark.parametrize("place", ["under a regular file", "read-only folder"])
def test_a_cache_folder_that_cannot_be_written_is_named_once_and_the_work_goes_on(place, tmp_path, monkeypatch):
    """index, vet and inspect run with the cache folder unwritable (ENOTDIR, or read-only for real, also as root:
    a tmpfs remounted ro): one warning naming the folder on stderr, no traceback, nothing left in /tmp."""
    from speco3_testkit.spectra import write_csv_archive

    arch = write_csv_archive(tmp_path / "arch", 2)
    script = tmp_path / "no.json"
    script.write_text(NO)
    (tmp_path / "file").write_text("x")
    ro = tmp_path / "ro"
    cache = tmp_path / "file" / "cache" if place == "under a regular file" else ro / "cache"
    runs = (["index", str(arch)],
            ["vet", str(arch), "--task", "cv", "--out", str(tmp_path / "r.sqlite"), "--scripted", str(script)],
            ["inspect", str(arch / "s00.csv"), "--task", "cv", "--scripted", str(script), "--out",
             str(tmp_path / "t"), "--quiet"])
    env = {**os.environ, "SPECO3_CACHE_DIR": str(cache)}
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("spec-o3-cache-*"))
    with read_only_folder(ro) if place == "read-only folder" else _nothing():
        for argv in runs:
            res = subprocess.run([sys.executable, "-m", "speco3", *argv], capture_output=True, text=True, env=env,
                                 timeout=120, check=False)
            assert res.returncode == 0 and "Traceback" not in res.stderr, (argv[0], res.stderr[-2000:])
            said = [line for line in res.stderr.splitlines() if "cache folder" in line]
            if argv[0] == "inspect":  # it keeps no cache: nothing to say
                assert said == [], res.stderr
                continue
            assert len(said) == 1 and f"cache folder {cache} cannot be written" in said[0], res.stderr
    with VettingStore(tmp_path / "r.sqlite", readonly=True) as store:
        assert len(store.model_verdicts("cv")) == 2
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob("spec-o3-cache-*")) <= before  # removed at exit


@contextlib.contextmanager
def _nothing():
    yield


KEEP_CACHE = """
import sys, time
from speco3.config import writable_cache
print(writable_cache("indexes"), flush=True)
time.sleep(120)
"""


def test_a_killed_process_s_temporary_cache_folder_is_swept_by_the_next(tmp_path):
    """SIGKILL skips the exit handler that removes a temporary cache folder: it is named with its process's pid, and
    the next process that needs one removes it; nothing else that looks like it (a live process's, a symbolic link,
    a file, another name, another user's) is touched."""
    from speco3_testkit.spectra import write_csv_archive

    temp = tmp_path / "tmp"
    temp.mkdir()
    (tmp_path / "file").write_text("x")
    env = {**os.environ, "SPECO3_CACHE_DIR": str(tmp_path / "file" / "cache"), "TMPDIR": str(temp)}
    child = subprocess.Popen([sys.executable, "-c", KEEP_CACHE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    try:
        left = Path(child.stdout.readline().strip()).parent
    finally:
        child.kill()
        child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    assert left.parent == temp and left.name.startswith(f"spec-o3-cache-{child.pid}-") and (left / "indexes").is_dir()
    dead = child.pid
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    kept = [temp / f"spec-o3-cache-{os.getpid()}-abcd_123",  # a live process's
            temp / f"spec-o3-cache-{dead}-linkxxxx",  # a symbolic link to a folder
            temp / f"spec-o3-cache-{dead}-filexxxx",  # a file
            temp / f"spec-o3-cache-{dead}-abcdefgh-more",  # not the exact name
            temp / f"spec-o3-cache-x{dead}-abcdefgh"]
    kept[0].mkdir()
    kept[1].symlink_to(victim, target_is_directory=True)
    kept[2].write_text("x")
    kept[3].mkdir()
    kept[4].mkdir()
    if os.geteuid() == 0:  # another user's folder (only root can make one)
        kept.append(temp / f"spec-o3-cache-{dead}-otheruse")
        kept[-1].mkdir()
        os.chown(kept[-1], 65534, 65534)
    arch = write_csv_archive(tmp_path / "arch", 2)
    res = subprocess.run([sys.executable, "-m", "speco3", "index", str(arch)], capture_output=True, text=True,
                         env=env, timeout=120, check=False)
    assert res.returncode == 0 and "cannot be written" in res.stderr, res.stderr[-2000:]
    assert not left.exists()  # swept
    assert sorted(temp.iterdir()) == sorted(kept)  # the rest as it was; the index run's own removed at its exit
    assert (victim / "keep").read_text() == "x" and kept[1].is_symlink()
