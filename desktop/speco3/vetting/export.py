"""Exports of a vetting store: CSV, VOTable and FITS tables (astropy; TOPCAT opens all three).

CSV and VOTable are UTF-8; FITS tables hold ASCII only, so other characters are written as Python escapes.

One row per spectrum and task, with the spectrum's identity and position, the latest model verdict (verdict,
outcome, its confidence over K rollouts — ``p_yes``, ``p_yes_token``, ``rollouts``, ``agreement``, ``abstained``,
``format_failures``, ``rollout_outcomes``, ``abstain_reason``, and ``k_used``, ``k_max``, ``stop_reason`` of adaptive
rollouts —, model, prompt version, cost) and the latest human decision (decision, flags, comment, vetter, time, and
the model verdict the vetter saw); flags, comment and evidence windows (``evidence``: ``6540-6590:Hα; 4840-4880:Hβ``,
observed frame, Å) are the vetter's latest, saved as edited even before a
decision (`VettingStore.save_annotation`). ``audit_draw`` and ``skippable`` come from the task's audit draw
(`speco3.vetting.stopping.audit_marks`). Missing values are masked (empty in CSV, null in VOTable, NaN/TNULL in FITS).
Every file is written atomically: to a temporary file beside the target, then ``os.replace``.
"""

from __future__ import annotations

import logging
import os
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from astropy.table import MaskedColumn, Table

from speco3 import __version__
from speco3.errors import StoreError
from speco3.fileio import write_atomic
from speco3.spectra.model import SNR_DEFINITION, SNR_LABEL
from speco3.vetting.records import evidence_text
from speco3.vetting.stopping import audit_marks
from speco3.vetting.store import VettingStore
from speco3.votable import write_votable

logger = logging.getLogger(__name__)

#: (column, kind, unit, description); kind: "str", "int", "float".
COLUMNS: list[tuple[str, str, str | None, str]] = [
    ("spectrum_key", "str", None, "Spectrum address (file#index)"),
    ("name", "str", None, "Spectrum name"),
    ("path", "str", None, "File path"),
    ("hdu_index", "int", None, "Index of the spectrum in its file"),
    ("survey", "str", None, "Survey"),
    ("object_id", "str", None, "Survey object id (obsid, targetid, plate-mjd-fiber)"),
    ("ra", "float", "deg", "Right ascension"),
    ("dec", "float", "deg", "Declination"),
    ("redshift", "float", None, "Catalogue redshift used for the rest frame"),
    ("snr", "float", None, f"{SNR_LABEL}: {SNR_DEFINITION}"),
    ("survey_snr", "float", None, "The S/N the survey's file states (a different definition per survey)"),
    ("survey_snr_name", "str", None, "The survey's name of that S/N (SNRG, SN_MEDIAN_ALL, MEDIAN_COADD_SNR_R ...)"),
    ("pipeline_class", "str", None, "Class from the survey pipeline"),
    ("pipeline_subclass", "str", None, "Subclass from the survey pipeline"),
    ("pipeline_z_err", "float", None, "Redshift error from the survey pipeline"),
    ("pipeline_zwarn", "int", None, "Redshift warning bits from the survey pipeline (0: clean)"),
    ("pipeline_zwarn_name", "str", None, "The survey's name of those bits (ZWARNING, ZWARN, Z_WARNIN)"),
    ("pipeline_deltachi2", "float", None, "redrock DELTACHI2: chi2 difference to the next-best fit (DESI)"),
    ("file_sha256", "str", None, "SHA-256 of the spectrum file"),
    ("task", "str", None, "Task id"),
    ("model_verdict", "str", None, "Model verdict YES/NO (empty: none)"),
    ("model_outcome", "str", None, "What the model run came to: YES, NO, tie, no_answer, abstained (K>1), or how "
     "its one run ended (format_error, budget_exhausted, ...)"),
    ("p_yes", "float", None, "Share of YES among the model's rollouts that answered (K=1: 1 or 0)"),
    ("p_yes_token", "float", None, "Mean model probability of YES at the verdict token (when recorded)"),
    ("rollouts", "int", None, "Number of model rollouts K"),
    ("agreement", "float", None, "Share of the answered rollouts that gave the majority verdict"),
    ("abstained", "int", None, "1: the model abstained (split evidence or too few answers), 0: it did not"),
    ("abstain_reason", "str", None, "Why the rollouts give no verdict to act on (a tie, split evidence, too few "
     "answers, no answer; empty for a verdict and a single run)"),
    ("format_failures", "int", None, "Rollouts that ended with a format error"),
    ("rollout_outcomes", "str", None, "Outcome of each rollout, comma separated"),
    ("k_used", "int", None, "Rollouts that ran (adaptive: as many as the stopping rule asked for)"),
    ("k_max", "int", None, "Rollout budget (fixed K: K)"),
    ("stop_reason", "str", None, "Why no more rollouts ran (certain, agreed, settled, budget, fixed, cancelled)"),
    ("model_id", "str", None, "Model"),
    ("model_quant", "str", None, "Quantization"),
    ("prompt_version", "str", None, "Prompt version hash"),
    ("model_turns", "int", None, "Assistant turns"),
    ("model_zooms", "int", None, "Zoom windows rendered"),
    ("model_tokens", "int", None, "Tokens generated"),
    ("model_seconds", "float", "s", "Wall time of the model run"),
    ("model_time", "str", None, "When the model ran (UTC)"),
    ("trace_dir", "str", None, "Folder of the evidence trace"),
    ("decision", "str", None, "Human decision YES/NO/UNSURE (empty: not vetted)"),
    ("flags", "str", None, "Quality flags, comma separated (as last left, also without a decision)"),
    ("comment", "str", None, "Vetter comment (as last left, also without a decision)"),
    ("evidence", "str", None, "Wavelength windows the vetter marked as evidence, in order, observed frame, Angstrom "
     "('6540-6590:label; 4840-4880'; as last left, also without a decision)"),
    ("vetter", "str", None, "Vetter"),
    ("vetter_z", "float", None, "The vetter's redshift (empty: not given)"),
    ("vetter_z_conf", "int", None, "The vetter's confidence in that redshift, 0-4 (as Marz's QOP, SDSS z_conf_person)"),
    ("vetter_class", "str", None, "The vetter's class"),
    ("vetter_subclass", "str", None, "The vetter's subclass"),
    ("decided_at", "str", None, "When the decision was made (UTC)"),
    ("model_verdict_seen", "str", None, "Model verdict shown to the vetter"),
    ("notes_at", "str", None, "When the flags or comment were last changed (UTC)"),
    ("audit_draw", "int", None, "Place in the task's audit sample, in its random order (1: drawn first; empty: not in it)"),
    ("skippable", "int", None, "1: left unread by a certified stop at the audit sample's recall target (spec-o3 "
     "triage), 0: not; empty: no audit sample for the task, or not screened"),
]
FORMATS = {"csv": "ascii.csv", "votable": "votable", "fits": "fits"}
#: How FITS exports spell what ASCII lacks (FITS character columns are ASCII): Greek letters by name as astronomers
#: write them in ASCII (Hα -> Halpha), the usual typographic signs by their ASCII forms; any other character by its
#: accent-free base letter (é -> e), and what has none as \uXXXX. CSV and VOTable keep the UTF-8 text.
TRANSLITERATION = {
    **dict(zip("αβγδεζηθικλμνξοπρστυφχψω",
               ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu",
                "nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"],
               strict=True)),
    **dict(zip("ΓΔΘΛΞΠΣΦΨΩ", ["Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Phi", "Psi", "Omega"],
               strict=True)),
    "–": "-", "—": "--", "…": "...", "·": ".", "×": "x", "±": "+/-", "²": "2", "³": "3", "√": "sqrt", "≥": ">=",
    "≤": "<=", "≈": "~", "“": '"', "”": '"', "‘": "'", "’": "'", "→": "->", "⊕": "(+)", "⊙": "(sun)", "°": "deg",
    "µ": "u", "Å": "A", "⚠": "(!)",
}


def fits_ascii(text: str) -> str:
    """``text`` as the FITS export writes it (see `TRANSLITERATION`)."""
    if text.isascii():
        return text
    out = []
    for ch in text:
        if ch.isascii():
            out.append(ch)
        elif ch in TRANSLITERATION:
            out.append(TRANSLITERATION[ch])
        else:
            base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
            out.append(base or f"\\u{ord(ch):04x}")
    return "".join(out)


def export_rows(store: VettingStore, task: str | None = None) -> list[dict[str, Any]]:
    """One dict per (spectrum, task) that has a model verdict, a decision or notes (flags/comment/evidence).

    Besides the `COLUMNS`, ``evidence_windows`` holds the evidence as a list of `Evidence` (the HTML report's)."""
    verdicts = {(v.spectrum_key, v.task): v for v in store.model_verdicts(task)}
    decisions = {(d.spectrum_key, d.task): d for d in store.decisions(task)}
    notes = {(a.spectrum_key, a.task): a for a in store.annotations(task)}
    keys = list(dict.fromkeys([*verdicts, *decisions, *notes]))
    marks = {tid: audit_marks(store, tid) for tid in dict.fromkeys(t for _, t in keys)}
    infos: dict[str, Any] = {}
    rows = []
    for key, tid in keys:
        if key not in infos:
            infos[key] = store.spectrum_info(key)
        s, v, d = infos[key], verdicts.get((key, tid)), decisions.get((key, tid))
        a = notes.get((key, tid))
        if a is not None and d is not None and a.updated_at < d.decided_at:
            a = None  # the decision was made after the notes were last changed: its notes are the latest
        flags = a.flags if a is not None else (d.flags if d else None)
        comment = a.comment if a is not None else (d.comment if d else None)
        evidence = a.evidence if a is not None else (d.evidence if d else [])
        rows.append({
            "spectrum_key": key, "name": s.name if s else None, "path": s.path if s else None,
            "hdu_index": s.index if s else None, "survey": s.survey if s else None,
            "object_id": s.object_id if s else None, "ra": s.ra if s else None, "dec": s.dec if s else None,
            "redshift": s.redshift if s else None, "snr": s.snr if s else None,
            "survey_snr": s.survey_snr if s else None, "survey_snr_name": s.survey_snr_name if s else None,
            "pipeline_class": s.cls if s else None, "pipeline_subclass": s.subclass if s else None,
            "pipeline_z_err": s.z_err if s else None, "pipeline_zwarn": s.zwarn if s else None,
            "pipeline_zwarn_name": s.zwarn_name if s else None, "pipeline_deltachi2": s.deltachi2 if s else None,
            "file_sha256": (v.file_sha256 if v and v.file_sha256 else (s.file_sha256 if s else None)),
            "task": tid,
            "model_verdict": v.verdict if v else None, "model_outcome": v.outcome if v else None,
            **confidence_fields(v), "model_run_id": v.id if v else None,  # (not a column: for the HTML report)
            "model_id": v.model_id if v else None, "model_quant": v.quant if v else None,
            "prompt_version": v.prompt_version if v else None, "model_turns": v.turns if v else None,
            "model_zooms": v.zooms if v else None, "model_tokens": v.tokens if v else None,
            "model_seconds": v.seconds if v else None, "model_time": v.created_at if v else None,
            "trace_dir": v.trace_dir if v else None,
            "decision": d.decision if d else None, "flags": ",".join(flags) if flags is not None else None,
            "comment": comment, "evidence": evidence_text(evidence) or None, "evidence_windows": evidence,
            "vetter": d.vetter if d else (a.vetter if a else None),
            "vetter_z": d.vetter_z if d else None, "vetter_z_conf": d.z_conf if d else None,
            "vetter_class": d.vetter_class if d else None, "vetter_subclass": d.vetter_subclass if d else None,
            "decided_at": d.decided_at if d else None, "model_verdict_seen": d.model_verdict_seen if d else None,
            "notes_at": a.updated_at if a is not None else (d.decided_at if d else None),
            "audit_draw": marks[tid].drawn.get(key),
            "skippable": skippable_flag(key, marks[tid].skippable) if v is not None else None,
        })
    return rows


def skippable_flag(key: str, skippable: set[str] | None) -> int | None:
    """The ``skippable`` column: 1 when a certified stop leaves the spectrum unread, 0 when not, None without a
    draw (`speco3.vetting.stopping.audit_marks`)."""
    return None if skippable is None else int(key in skippable)


def confidence_fields(v) -> dict[str, Any]:
    """The fold of a model run's rollouts as export values (all None without a run or for rows stored before)."""
    get = (lambda a: getattr(v, a, None)) if v is not None else (lambda a: None)
    outcomes = get("outcomes")
    abstained = get("abstained")
    return {"p_yes": get("p_yes"), "p_yes_token": get("p_yes_token"), "rollouts": get("rollouts"),
            "agreement": get("agreement"), "abstained": None if abstained is None else int(abstained),
            "format_failures": get("format_failures"),
            "rollout_outcomes": ",".join(outcomes) if outcomes is not None else None,
            "k_used": get("rollouts"), "k_max": get("k_max"), "stop_reason": get("stop_reason"),
            "abstain_reason": (v.reason or None) if v is not None else None}


def export_table(store: VettingStore, task: str | None = None) -> Table:
    """The export as an astropy `Table` (masked where a value is missing)."""
    table = rows_table(export_rows(store, task), COLUMNS)
    table.meta.update({"ORIGIN": f"spec-o3 {__version__}", "STORE": str(store.path.name)})
    return table


def rows_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str | None, str]]) -> Table:
    """An astropy `Table` of dict rows with ``columns`` as (name, kind, unit, description), masked where None."""
    table = Table()
    for name, kind, unit, desc in columns:
        values = [r.get(name) for r in rows]
        mask = np.array([v is None for v in values], dtype=bool)
        if kind == "str":
            data = np.array(["" if v is None else str(v) for v in values], dtype=str)
            if data.dtype.itemsize == 0:
                data = data.astype("U1")
        elif kind == "int":
            data = np.array([0 if v is None else int(v) for v in values], dtype=np.int64)
        else:
            data = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
        table.add_column(MaskedColumn(data, name=name, mask=mask, unit=unit, description=desc))
    return table


def check_target(store: VettingStore, path: str | Path, *, overwrite: bool = False) -> Path:
    """Refuse to write an export where it would destroy something: the store being read (the same file by inode,
    however it is spelled, or its ``-wal``/``-shm``/``-journal`` companions) always, any other existing file unless
    ``overwrite`` (the CLI's ``--force``; the app asks first). Returns ``path``.

    Raises
    ------
    StoreError
        Naming the target and what it is.
    """
    path = Path(path).expanduser()
    if not path.exists():
        return path
    for suffix in ("", "-wal", "-shm", "-journal"):
        own = Path(f"{store.path}{suffix}")
        try:
            same = own.exists() and os.path.samefile(path, own)
        except OSError:
            same = False
        if same:
            raise StoreError(f"{path}: is the vetting store being exported{' (' + suffix[1:] + ' file)' if suffix else ''}; "
                             "refusing to overwrite it (choose another output file)")
    if path.is_dir():
        raise StoreError(f"{path}: is a folder; give a file name")
    if not overwrite:
        raise StoreError(f"{path}: already exists; give --force to replace it")
    return path


def export(store: VettingStore, path: str | Path, fmt: str | None = None, task: str | None = None, *,
           overwrite: bool = False) -> Path:
    """Write the export table as ``csv``, ``votable`` or ``fits`` (default: from the file extension), atomically.

    An existing file is replaced only with ``overwrite``, and never when it is the store itself (`check_target`).
    """
    path = check_target(store, path, overwrite=overwrite)
    if fmt is None:
        ext = path.suffix.lower().lstrip(".")
        fmt = {"csv": "csv", "xml": "votable", "vot": "votable", "votable": "votable", "fits": "fits",
               "fit": "fits"}.get(ext)
        if fmt is None:
            raise StoreError(f"{path}: cannot tell the format from the extension (use .csv, .vot/.xml or .fits)")
    if fmt not in FORMATS:
        raise StoreError(f"unknown export format {fmt!r} (csv, votable, fits)")
    table = export_table(store, task)
    if fmt == "fits":  # FITS strings are ASCII: a documented transliteration (`fits_ascii`: Hα -> Halpha)
        for name in table.colnames:
            col = table[name]
            if col.dtype.kind == "U":
                escaped = [fits_ascii(str(v)) for v in col.data.data]
                table[name] = MaskedColumn(np.array(escaped, dtype=str), name=name, mask=col.mask,
                                           unit=col.unit, description=col.description)

    def writer(tmp: Path) -> None:
        if fmt == "votable":  # string columns variable-length, nulls as empty cells: lints clean (speco3.votable)
            write_votable(table, tmp)
        else:
            table.write(tmp, format=FORMATS[fmt], overwrite=True)

    try:
        write_atomic(path, writer)
    except OSError as exc:
        raise StoreError(f"{path}: cannot write ({exc.strerror or exc})") from exc
    logger.info("exported %d rows to %s", len(table), path)
    return path
