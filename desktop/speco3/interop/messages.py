"""SAMP messages: the parameters this app sends, and incoming messages checked and turned into plain events.

Outgoing: ``spectrum.load.ssa-generic`` (url, SSA metadata keyed by utype and UCD, name), ``table.load.votable``
(url, table-id, name) and ``coord.pointAt.sky`` (ra, dec in degrees, as SAMP strings). Incoming messages are
validated here, off the GUI, and become frozen dataclasses holding only str/int/float values, so that the GUI
thread receives plain data; anything malformed becomes a `Malformed` event with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from speco3.interop.fetch import Refused, check_url

if TYPE_CHECKING:
    from speco3.spectra.model import Spectrum

SPECTRUM_LOAD = "spectrum.load.ssa-generic"
TABLE_LOAD = "table.load.votable"
POINT_AT = "coord.pointAt.sky"
HIGHLIGHT = "table.highlight.row"
SELECT_ROWS = "table.select.rowList"
RECEIVED = (HIGHLIGHT, SELECT_ROWS, POINT_AT, TABLE_LOAD)
#: The message types this app sends, with the word the Peers menu and ``samp status`` show for a peer that takes it.
SENT = {SPECTRUM_LOAD: "spectra", TABLE_LOAD: "tables", POINT_AT: "sky positions"}
MAX_ROWS = 100_000
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def file_url(path: Path) -> str:
    return Path(path).resolve().as_uri()


def spectrum_params(spec: Spectrum, path: Path, fmt: str, mime: str) -> dict[str, Any]:
    """Parameters of ``spectrum.load.ssa-generic`` for a spectrum written to ``path``."""
    m = spec.meta
    url = file_url(path)
    meta = {"ssa:Access.Reference": url, "ssa:Access.Format": mime, "ssa:Target.Name": str(m.object_id or spec.name),
            "ssa:DataID.Title": spec.name, "ssa:Char.SpectralAxis.Unit": "Angstrom",
            "ssa:Char.SpectralAxis.Ucd": "em.wl", "ssa:Char.FluxAxis.Ucd": "phot.flux.density;em.wl",
            "meta.ref.url": url, "meta.code.mime": mime, "meta.title": spec.name}
    if spec.flux_unit:
        meta["ssa:Char.FluxAxis.Unit"] = spec.flux_unit
    if m.ra is not None and m.dec is not None:
        meta["ssa:Target.Pos"] = meta["pos.eq;meta.main"] = f"{float(m.ra)!r} {float(m.dec)!r}"
    if m.redshift is not None and math.isfinite(m.redshift):
        meta["ssa:Target.Redshift"] = meta["src.redshift"] = repr(float(m.redshift))
    if m.survey:
        meta["ssa:DataID.Collection"] = str(m.survey)
    return {"url": url, "meta": meta, "name": spec.name}


def table_params(path: Path, table_id: str, name: str) -> dict[str, Any]:
    return {"url": file_url(path), "table-id": table_id, "name": name}


def point_params(ra: float, dec: float) -> dict[str, Any]:
    if not (math.isfinite(ra) and math.isfinite(dec) and -90 <= dec <= 90):
        raise ValueError(f"not a sky position: ra={ra}, dec={dec}")
    return {"ra": repr(float(ra) % 360.0), "dec": repr(float(dec))}


# -- incoming --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Highlight:
    table_id: str
    url: str
    row: int
    sender: str = ""
    keys: tuple[str, ...] = ()  # the row's spectrum key, filled in by the link for a table it sent


@dataclass(frozen=True)
class SelectRows:
    table_id: str
    url: str
    rows: tuple[int, ...]
    sender: str = ""
    keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class PointAt:
    ra: float
    dec: float
    sender: str = ""


@dataclass(frozen=True)
class LoadTable:
    url: str
    table_id: str
    name: str
    sender: str = ""
    path: str = ""  # the file to read (a checked local table or the private copy of a download), by the link
    sender_name: str = ""  # the sender's samp.name as it declared it (a peer may claim any name), by the link


@dataclass(frozen=True)
class Malformed:
    mtype: str
    reason: str
    sender: str = ""


class BadMessage(ValueError):
    """An incoming message whose parameters are missing or of the wrong kind."""


def _text(params: dict, key: str, required: bool = True) -> str:
    value = params.get(key)
    if value is None or value == "":
        if required:
            raise BadMessage(f"missing parameter '{key}'")
        return ""
    if not isinstance(value, str):
        raise BadMessage(f"parameter '{key}' is not a string ({type(value).__name__})")
    return value


def _int(text: str, key: str) -> int:
    try:
        n = int(text.strip())
    except (ValueError, AttributeError) as exc:
        raise BadMessage(f"parameter '{key}' is not an integer: {text!r:.40}") from exc
    if n < 0:
        raise BadMessage(f"parameter '{key}' is negative: {n}")
    return n


def _float(text: str, key: str) -> float:
    try:
        x = float(text.strip())
    except (ValueError, AttributeError) as exc:
        raise BadMessage(f"parameter '{key}' is not a number: {text!r:.40}") from exc
    if not math.isfinite(x):
        raise BadMessage(f"parameter '{key}' is not finite: {text!r:.40}")
    return x


#: What an incoming SAMP message becomes (`parse_incoming`).
Incoming = Highlight | SelectRows | PointAt | LoadTable | Malformed


def parse_incoming(mtype: str, params: object, sender: str = "") -> Incoming:
    """The event for an incoming message, or `Malformed` with the reason."""
    try:
        if not isinstance(params, dict):
            raise BadMessage(f"parameters are a {type(params).__name__}, not a map")
        if mtype == HIGHLIGHT:
            return Highlight(_text(params, "table-id", False), _text(params, "url", False),
                             _int(_text(params, "row"), "row"), sender)
        if mtype == SELECT_ROWS:
            rows = params.get("row-list")
            if not isinstance(rows, list):
                raise BadMessage("parameter 'row-list' is missing or not a list")
            if len(rows) > MAX_ROWS:
                raise BadMessage(f"row-list has {len(rows)} rows (at most {MAX_ROWS})")
            return SelectRows(_text(params, "table-id", False), _text(params, "url", False),
                              tuple(_int(r if isinstance(r, str) else "x", "row-list") for r in rows), sender)
        if mtype == POINT_AT:
            ra, dec = _float(_text(params, "ra"), "ra"), _float(_text(params, "dec"), "dec")
            if not -90.0 <= dec <= 90.0:
                raise BadMessage(f"dec {dec} outside [-90, 90]")
            return PointAt(ra % 360.0, dec, sender)
        if mtype == TABLE_LOAD:
            url = _text(params, "url")
            try:
                check_url(url)  # refuse what this app never reads now, with the reason (speco3.interop.fetch)
            except Refused as exc:
                raise BadMessage(f"{exc}: {url:.80}") from None
            return LoadTable(url, _text(params, "table-id", False), _text(params, "name", False), sender)
        raise BadMessage(f"this application does not handle {mtype}")
    except BadMessage as exc:
        return Malformed(mtype, str(exc), sender)


def local_path(url: str) -> Path | None:
    """The file of a ``file:`` URL (not checked: for URLs this app wrote itself; a peer's go through
    `speco3.interop.fetch`); None for an ``http(s)`` URL on this machine; `BadMessage` for anything else."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise BadMessage(f"file URL on another host refused: {url:.80}")
        return Path(unquote(parsed.path))
    if parsed.scheme in ("http", "https") and (parsed.hostname or "") in LOOPBACK_HOSTS:
        return None
    raise BadMessage(f"only local files and loopback URLs are read (offline): {url:.80}")
