"""``spec-o3 info FILE…`` and ``spec-o3 index DIR``.

``info`` prints one block per spectrum (format, metadata, pixels, wavelength range, masked fraction); ``--json``
prints a list of objects instead. A file that cannot be read prints its reason and makes the exit status 1.
``index`` scans an archive folder into its SQLite index (progress bar on stderr), prints a summary of formats,
counts and errors, and optionally lists entries with filters.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from speco3.errors import SpectrumReadError
from speco3.spectra.index import SORTABLE
from speco3.spectra.model import SNR_LABEL, Spectrum
from speco3.spectra.specutils_io import to_specutils

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("info", help="show format, metadata and pixel statistics of spectrum files")
    p.add_argument("files", nargs="+", metavar="FILE", help="spectrum files or FILE#N addresses")
    p.add_argument("--json", action="store_true", help="print JSON instead of text blocks")
    p.add_argument("--specutils", action="store_true",
                   help="also show each spectrum as specutils sees it (speco3.spectra.specutils_io.to_specutils; needs specutils)")
    p.set_defaults(func=cmd_info)

    q = sub.add_parser("index", help="index an archive folder (incremental) and summarise it")
    q.add_argument("root", metavar="DIR", help="archive folder")
    q.add_argument("--db", help="index database (default: the user cache folder)")
    q.add_argument("--workers", type=int, default=2, help="reader processes (default 2)")
    q.add_argument("--no-scan", action="store_true", help="only query the existing index")
    q.add_argument("--list", action="store_true", help="list the entries that match the filters")
    q.add_argument("--errors", action="store_true", help="list the files that could not be read")
    q.add_argument("--survey")
    q.add_argument("--cls", help="object class (STAR, GALAXY, QSO, ...)")
    q.add_argument("--z-min", type=float)
    q.add_argument("--z-max", type=float)
    q.add_argument("--snr-min", type=float, help="minimum S/N 4000–8000 Å (ours, one definition for every survey)")
    q.add_argument("--text", help="substring of key, object id, class or note")
    q.add_argument("--sort", default="file_name", choices=SORTABLE, metavar="COLUMN",
                   help="sort column: " + ", ".join(SORTABLE))
    q.add_argument("--desc", action="store_true")
    q.add_argument("--limit", type=int)
    q.add_argument("--json", action="store_true", help="print JSON")
    q.set_defaults(func=cmd_index)


# -- info ------------------------------------------------------------------------------------------------
def spectrum_record(spec: Spectrum) -> dict[str, Any]:
    """JSON-ready description of a Spectrum."""
    import numpy as np

    m = spec.meta
    good = spec.good
    wave = spec.wavelength[good] if good.any() else spec.wavelength
    rec = {k: v for k, v in m.to_dict().items() if k != "extra"}
    rec.update(
        n_pixels=spec.n_pixels,
        wavelength_min=float(np.min(wave)), wavelength_max=float(np.max(wave)),
        masked_fraction=round(spec.masked_fraction, 5), flux_unit=spec.flux_unit, medium=spec.medium,
        has_ivar=spec.ivar is not None, extra={k: _jsonable(v) for k, v in m.extra.items()},
    )
    return rec


def _jsonable(v: object) -> str | int | float | bool | None | list[object]:
    if isinstance(v, str | int | float | bool) or v is None:
        return v
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item"):
        return v.item()
    return str(v)


def specutils_record(spec: Spectrum) -> dict[str, Any]:
    """What ``to_specutils(spec)`` holds: class, units, axis range, uncertainty type, masked pixels, redshift."""
    sp = to_specutils(spec)
    axis = sp.spectral_axis
    unc = sp.uncertainty
    return {"class": f"{type(sp).__module__.split('.')[0]}.{type(sp).__name__}", "flux_unit": sp.flux.unit.to_string(),
            "spectral_axis": f"{axis.value.min():.2f} - {axis.value.max():.2f} {axis.unit}",
            "uncertainty": type(unc).__name__ if unc is not None else None,
            "masked": int(sp.mask.sum()) if sp.mask is not None else 0,
            "redshift": float(sp.redshift.value) if spec.meta.redshift is not None else None}


def _block(rec: dict[str, Any]) -> str:
    lines = [f"{rec['path'] or rec['file_name']}#{rec['index']}  [{rec['format']}]"]

    def add(label: str, value: object) -> None:
        if value not in (None, ""):
            lines.append(f"  {label:<16}{value}")

    add("survey", rec["survey"])
    add("release", rec["data_release"])
    add("object", rec["object_id"])
    if rec["ra"] is not None and rec["dec"] is not None:
        add("ra, dec", f"{rec['ra']:.6f}, {rec['dec']:.6f}")
    cls = " ".join(x for x in (rec["cls"], rec["subclass"]) if x)
    add("class", cls)
    if rec["redshift"] is not None:
        add("redshift", f"{rec['redshift']:.6g}" + (f"  ({rec['redshift_source']})" if rec["redshift_source"] else ""))
    if rec["snr"] is not None:
        add(SNR_LABEL, f"{rec['snr']:.2f}  (median per pixel, computed for every survey)")
    if rec["extra"].get("survey_snr") is not None:
        add("survey S/N", f"{float(rec['extra']['survey_snr']):.2f}  ({rec['extra'].get('survey_snr_name')})")
    add("hdu", rec["hdu"] if rec["row"] is None else f"{rec['hdu']} row {rec['row']}")
    add("pixels", rec["n_pixels"])
    add("wavelength", f"{rec['wavelength_min']:.1f} - {rec['wavelength_max']:.1f} Å ({rec['medium']})")
    add("masked", f"{rec['masked_fraction']:.1%}")
    add("flux unit", rec["flux_unit"] or "(arbitrary / not stated)")
    add("errors", "ivar" if rec["has_ivar"] else "none")
    add("note", rec["note"])
    if rec["format"] == "specutils-fallback":
        add("reader", "specutils fallback: no Spec-o3 reader knows this layout; specutils' "
            f"'{rec['extra'].get('specutils_loader')}' loader read it")
    if "specutils" in rec:
        su = rec["specutils"]
        add("specutils", f"{su['class']}: flux [{su['flux_unit'] or 'dimensionless'}], {su['spectral_axis']}, "
            f"uncertainty {su['uncertainty'] or 'none'}, {su['masked']} masked"
            + (f", z={su['redshift']:.6g}" if su["redshift"] is not None else ""))
    return "\n".join(lines)


def cmd_info(args) -> int:
    from speco3.spectra import parse_address, read_file
    from speco3.spectra.specutils_io import fallback_enabled

    records, status = [], 0
    for item in args.files:
        path, selector = parse_address(item)
        try:
            with fallback_enabled():  # one file a person asked about: worth specutils' slower look
                contents = read_file(path)
            specs = contents.spectra
            if selector is not None:
                from speco3.spectra.registry import select_spectrum

                specs = [select_spectrum(specs, selector, path)]
        except SpectrumReadError as exc:
            status = 1
            if args.json:
                records.append({"path": str(Path(path)), "error": exc.reason})
            else:
                print(f"{path}: cannot read: {exc.reason}\n")
            continue
        for spec in specs:
            rec = spectrum_record(spec)
            if args.specutils:
                rec["specutils"] = specutils_record(spec)
            records.append(rec)
            if not args.json:
                print(_block(rec) + "\n")
        if contents.skipped and not args.json:
            for what, why in contents.skipped:
                print(f"  skipped {what}: {why}")
            print()
    if args.json:
        json.dump(records, sys.stdout, indent=1, default=str)
        print()
    return status


# -- index -----------------------------------------------------------------------------------------------
class ProgressBar:
    """A one-line progress bar on stderr (plain lines every 10 % when stderr is not a terminal)."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.monotonic()
        self._last = 0.0
        self._decile = -1

    def __call__(self, path: str, done: int, total: int) -> None:
        frac = done / total if total else 1.0
        now = time.monotonic()
        rate = done / max(now - self.t0, 1e-6)
        if self.tty:
            if now - self._last < 0.1 and done < total:
                return
            self._last = now
            bar = "#" * int(frac * 30)
            self.stream.write(f"\rindexing [{bar:<30}] {done}/{total} ({rate:.0f} files/s) {Path(path).name[:40]}\x1b[K")
            if done >= total:
                self.stream.write("\n")
        elif int(frac * 10) > self._decile:
            self._decile = int(frac * 10)
            self.stream.write(f"indexing: {done}/{total} files ({frac:.0%}, {rate:.0f} files/s)\n")
        self.stream.flush()


def cmd_index(args) -> int:
    from speco3.spectra.index import ArchiveIndex

    index = ArchiveIndex(args.db) if args.db else ArchiveIndex.for_root(args.root)
    with index:
        scan = None
        if not args.no_scan:
            scan = index.scan(args.root, progress=ProgressBar(), workers=args.workers)
        summary = index.summary()
        filters = {"survey": args.survey, "cls": args.cls, "z_min": args.z_min, "z_max": args.z_max,
                   "snr_min": args.snr_min, "text": args.text}
        listing = None
        if args.list or any(v is not None for v in filters.values()):
            listing = index.query(**filters, has_error=False, sort=args.sort, descending=args.desc, limit=args.limit)
        errors = index.errors() if args.errors or not args.json else []
        if args.json:
            out: dict[str, Any] = {"db": str(index.db_path), "summary": summary}
            if scan is not None:
                out["scan"] = scan.to_dict()
            if listing is not None:
                out["entries"] = [e.__dict__ for e in listing]
            if args.errors:
                out["errors"] = [{"key": e.key, "error": e.error} for e in errors]
            json.dump(out, sys.stdout, indent=1, default=str)
            print()
            return 0
        if scan is not None:
            print(f"scanned {scan.files_seen} files in {scan.seconds:.1f} s: {scan.files_read} read, "
                  f"{scan.files_unchanged} unchanged, {scan.files_removed} removed")
        print(f"index {index.db_path}")
        print(f"{summary['spectra']} spectra in {summary['files']} files; {summary['errors']} files unreadable; "
              f"{summary['skipped']} entries skipped")
        if summary["companions"]:
            names = ", ".join(index.companions()[:3]) + (" …" if summary["companions"] > 3 else "")
            print(f"{summary['companions']} companion files read with their spectra (e.g. DESI redrock): {names}")
        for fmt, n in summary["by_format"].items():
            print(f"  {fmt:<18}{n:>8}")
        if errors:
            print("unreadable files:" if args.errors else "unreadable files (first 10; --errors for all):")
            for e in errors if args.errors else errors[:10]:
                print(f"  {e.key.rsplit('#', 1)[0]}: {e.error}")
        if listing is not None:
            print(f"{len(listing)} matching entries:")
            for e in listing:
                z = f"z={e.redshift:.4f}" if e.redshift is not None else ""
                snr = f"S/N={e.snr:.1f}" if e.snr is not None else ""
                print(f"  {e.key:<60} {e.format or '':<15} {e.cls or '':<7} {z:<10} {snr}")
    return 0
