"""``spec-o3 decide STORE FILE[#N] --task T --verdict YES|NO|UNSURE [--evidence 6500-6600[:label]]...``: record a
human decision from the command line, as the app's decision panel does (for scripted or remote vetting, and tests).

The spectrum is read first (a file that cannot be read or a ``#N`` it does not hold is refused with exit status 2
and nothing is written), then the task and the evidence windows are checked (a window entirely outside the
spectrum's wavelength range is refused). The decision goes to the store under the spectrum's address
(`speco3.vetting.records.spectrum_key`, the key the app and ``spec-o3 vet`` use for the same file), with what
exports show of the spectrum (`SpectrumInfo`), the vetter (default: the vetter name set in the app's Settings, the one
name both use; else the login name) and the latest
model verdict for the task as the one seen.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from speco3.agent.tasks import get_task
from speco3.errors import Speco3Error, TaskError
from speco3.spectra import parse_address, read_spectrum
from speco3.spectra.model import Spectrum
from speco3.spectra.view import View
from speco3.vetting.records import (
    DECISIONS,
    STANDARD_FLAGS,
    Decision,
    Evidence,
    SpectrumInfo,
    evidence_text,
    label_warnings,
    parse_evidence_list,
    spectrum_key,
    vetter_name,
)
from speco3.vetting.screening import file_sha256
from speco3.vetting.store import VettingStore

#: Exit status of a refused input (unreadable spectrum, bad #N, unknown task, bad or out-of-range window).
EXIT_BAD_INPUT = 2


def register(sub) -> None:
    d = sub.add_parser(
        "decide", help="record a human decision (with evidence windows) on one spectrum",
        description="Record a human decision on one spectrum in a vetting store, as the app's decision panel "
        "does: the verdict, the wavelength windows marked as evidence (in order), flags and a comment. The latest "
        "model verdict for the task is linked as the one the vetter saw. Refused inputs (unreadable spectrum, a "
        "#N the file does not hold, unknown task, a window outside the spectrum) exit with status 2 and write "
        "nothing.")
    d.add_argument("store", metavar="STORE", help="vetting store (SQLite; created when missing)")
    d.add_argument("address", metavar="FILE[#N]", help="spectrum file, or FILE#N for the N-th spectrum in it")
    d.add_argument("--task", required=True, help="task id (cv, carbon, ss, gm, wd, or a user task)")
    d.add_argument("--verdict", required=True, type=str.upper, choices=DECISIONS, help="the decision")
    d.add_argument("--evidence", action="append", default=[], metavar="LO-HI[:LABEL][,...]",
                   help="a wavelength window marked as evidence, in Å on the spectrum's own axis: the OBSERVED frame "
                   "(a line at z > 0 is at its rest wavelength × (1 + z)), with an optional label, e.g. 6540-6590:Hα "
                   "for a star at z ≈ 0; a label naming a task line outside its window at the spectrum's z is "
                   "warned about; repeat the option, or give several windows in one "
                   "value separated by commas (labels then cannot hold commas). Kept in the order given")
    d.add_argument("--comment", default="", help="a comment stored with the decision")
    d.add_argument("--flag", action="append", default=[], metavar="FLAG",
                   help=f"an issue flag ({', '.join(STANDARD_FLAGS)}, or your own); repeat for several")
    d.add_argument("--vetter", default="", help="who decides (default: the vetter name set in the app's Settings, "
                   "shared by both; else the login name)")
    d.add_argument("--z", type=float, help="your own redshift of the spectrum")
    d.add_argument("--z-conf", type=int, choices=range(5), metavar="0-4",
                   help="your confidence in that redshift, 0-4 (as Marz's QOP and SDSS's z_conf_person)")
    d.add_argument("--class", dest="cls", help="your class of the object (e.g. QSO, STAR, CV)")
    d.add_argument("--subclass", help="your subclass")
    d.add_argument("--json", action="store_true", help="print the stored decision as JSON")
    d.set_defaults(func=cmd_decide)


def _refuse(text: str) -> int:
    print(f"error: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


def read_address(address: str) -> Spectrum:
    """The spectrum at ``FILE[#N]``, its path made absolute (the store key then matches the app's for the file)."""
    path, selector = parse_address(address)
    return read_spectrum(str(Path(path).expanduser().resolve()), selector)


def check_windows(values: list[str], spectrum: Spectrum) -> list[Evidence]:
    """The ``--evidence`` values as windows; ValueError naming a window that is malformed or entirely outside the
    spectrum's wavelength range (the zoom tool's data range, in the observed frame)."""
    windows = []
    for value in values:
        try:
            windows += parse_evidence_list(value)
        except ValueError as exc:
            raise ValueError(f"--evidence {value!r}: {exc}") from None
    data = View(spectrum, None, frame="observed").data_range()
    for w in windows:
        if data is not None and (w.hi < data[0] or w.lo > data[1]):
            raise ValueError(f"evidence window {w} lies outside the spectrum's wavelength range "
                             f"{data[0]:g}-{data[1]:g} Å (observed frame)")
    return windows


def fit_text(d: Decision) -> str | None:
    """The vetter's z, confidence, class and subclass of a stored decision in words (None: none given)."""
    parts = []
    if d.vetter_z is not None:
        parts.append(f"z {d.vetter_z:g}" + (f" (confidence {d.z_conf})" if d.z_conf is not None else ""))
    if d.vetter_class or d.vetter_subclass:
        parts.append("class " + " ".join(v for v in (d.vetter_class, d.vetter_subclass) if v))
    return " · ".join(parts) or None


def cmd_decide(args: argparse.Namespace) -> int:
    # the vetter's z, confidence and class first: a refusal writes nothing, not even a new store
    problem = Decision("", args.task, args.verdict, vetter_z=args.z, z_conf=args.z_conf, vetter_class=args.cls,
                       vetter_subclass=args.subclass).fit_problem()
    if problem is not None:
        return _refuse(problem.replace("give your z too", "give --z too") if args.z is None else problem)
    try:
        spectrum = read_address(args.address)
    except (Speco3Error, OSError) as exc:
        return _refuse(f"{args.address}: {exc}" if isinstance(exc, OSError) else str(exc))
    try:
        task = get_task(args.task)
    except TaskError as exc:
        return _refuse(str(exc))
    try:
        evidence = check_windows(args.evidence, spectrum)
    except ValueError as exc:
        return _refuse(str(exc))
    for warning in label_warnings(evidence, task.lines, spectrum.z):  # stored as given: the vetter may mean it
        print(f"warning: {warning}", file=sys.stderr)
    key = spectrum_key(spectrum)
    with VettingStore(args.store) as store:
        mv = store.latest_model_verdict(key, task.id)
        decision = Decision(spectrum_key=key, task=task.id, decision=args.verdict, flags=list(args.flag),
                            comment=args.comment, vetter=vetter_name(args.vetter),
                            model_verdict_seen=mv.verdict if mv else None, model_verdict_id=mv.id if mv else None,
                            evidence=evidence, vetter_z=args.z, z_conf=args.z_conf, vetter_class=args.cls,
                            vetter_subclass=args.subclass)
        if (problem := decision.fit_problem()) is not None:
            return _refuse(problem)
        sha = file_sha256(spectrum.meta.path) if spectrum.meta.path else None
        store.record_spectrum(SpectrumInfo.of(key, spectrum, sha))
        store.record_decision(decision)
    if args.json:
        print(json.dumps(decision.to_dict(), ensure_ascii=False))
        return 0
    seen = f"{mv.headline} (run #{mv.id}, {mv.model_id})" if mv else "none"
    print(f"stored {decision.decision} for {key} · task {task.id} · vetter {decision.vetter} · decision #{decision.id}")
    print(f"evidence: {evidence_text(evidence) or 'none'}")
    if (fit := fit_text(decision)) is not None:
        print(f"your fit: {fit}")
    if decision.flags:
        print(f"flags: {', '.join(decision.flags)}")
    if decision.comment:
        print(f"comment: {decision.comment}")
    print(f"model verdict seen: {seen}")
    return 0


__all__ = ["EXIT_BAD_INPUT", "cmd_decide", "register"]
