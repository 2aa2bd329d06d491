"""``spec-o3 triage STORE --task T --recall R --confidence C [--json] [--draw N [--seed S]]``: may the observer stop
vetting? The certified stopping test of `speco3.vetting.stopping`; exit 0 for ``stop``, 3 for ``continue`` (also
while spectra of the archive are not screened for the task: the test covers screened spectra only). The archive is
``--archive``, else the one the store was made for (``vet`` and the app record it), else the spectra the store
knows of."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from speco3.cli.archive import open_archive
from speco3.errors import StoreError
from speco3.vetting.archive_store import archive_keys
from speco3.vetting.records import login_vetter
from speco3.vetting.stopping import Certificate, assess, check_target, draw, percent, plural
from speco3.vetting.store import ARCHIVE_ROOT_STATE, VettingStore

#: Exit status when the verdict is ``continue`` (0: ``stop``; 1: an error).
EXIT_CONTINUE = 3


def register(sub) -> None:
    t = sub.add_parser(
        "triage", help="may I stop vetting? a certified recall from a random audit sample of the unread spectra",
        description="Working down the likely-first order (spec-o3 queue), an observer may stop once a uniform random "
        "sample of the spectra left shows, at the confidence asked, that the unread hold at most a share 1-R of all "
        "candidates (an exact hypergeometric test; see the manual's How-to -> When to stop, docs/howto/stopping.md). Without a sample it says how many random "
        "spectra must be decided; --draw N draws them, the audit sample (recorded in the store with its seed; a "
        "further --draw extends the same sample, never redraws). Decide the audit sample in its order (spec-o3 queue "
        "--audit). The test covers the screened spectra only: while spectra of the archive (--archive, else the one "
        "the store was made for, else the spectra the store knows of) have no verdict for the task, the verdict is "
        "continue, the line says how many are not screened (JSON: unscreened) and --draw is refused: screen them "
        "first (spec-o3 vet). "
        "Exit status: 0 stop, 3 continue (also while spectra are not screened), 1 error.")
    t.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    t.add_argument("--task", help="the task (default: the store's only task)")
    t.add_argument("--archive", metavar="DIR|INDEX",
                   help="the archive folder (or an index database of one) whose every spectrum must be screened "
                   "before a stop; its spectra without a verdict for the task count as not screened (sky fibres and "
                   "fully masked spectra left out, as spec-o3 vet leaves them). Default: the archive the store was "
                   "made for (spec-o3 vet and the app record it), when it is there; else the spectra the store "
                   "knows of")
    t.add_argument("--recall", type=float, default=0.9, help="recall target R (default 0.9)")
    t.add_argument("--confidence", type=float, default=0.95, help="confidence C (default 0.95)")
    t.add_argument("--draw", type=int, metavar="N", help="draw N more random spectra of the unread into the audit sample")
    t.add_argument("--seed", type=int, help="seed of the audit sample's first draw (default: a fresh one, recorded)")
    t.add_argument("--miss-rate", type=float, metavar="ALPHA",
                   help="also the p_yes threshold for the next archive: the largest whose share of candidates below "
                   "it is at most ALPHA at the confidence (Learn-then-Test, binomial p-values), from a draw uniform "
                   "over the whole screened archive (made before any decision). Holds only for an archive "
                   "exchangeable with this one: same survey, task and model")
    t.add_argument("--vetter", default="", help="who draws (default: the login name)")
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    t.set_defaults(func=cmd_triage)


def _task(store: VettingStore, task: str | None) -> str:
    tasks = store.tasks()
    if task:
        if task not in tasks:
            raise StoreError(f"{store.path}: no task {task!r} (tasks: {', '.join(tasks) or 'none'})")
        return task
    if len(tasks) != 1:
        raise StoreError(f"{store.path}: name the task with --task (tasks: {', '.join(tasks) or 'none'})")
    return tasks[0]


def report_text(c: Certificate) -> str:
    """The certificate for a terminal: the queue's line, then the figures behind it."""
    lines = [c.line(), f"verdict: {c.verdict}"]
    if c.sample_drawn:
        how = ", ".join(f"{d['added']} on {d['created_at'][:19]}Z" for d in c.draws)
        lines.append(f"audit sample: {plural(c.sample_drawn, 'spectrum', 'spectra')} drawn at random (seed {c.seed}) "
                     f"from the {c.frame:,} unread at the first draw ({how}); {c.labels_used:,} decided in its order "
                     f"count as labels, {plural(c.positives_used, 'candidate')} among them (YES or UNSURE)")
    if c.p_value is not None and c.frame:
        unread = c.remaining - c.unframed  # the unread of the frame: more labels than these there are not
        more = max(0, c.labels_lower_bound - c.labels_used)
        need = ("" if c.covered or not unread else
                f"; any certificate from a random sample would need all {unread:,} unread decided" if more >= unread
                else f"; any certificate from a random sample needs at least {plural(more, 'more random label')} now")
        lines.append(f"test: p = {c.p_value:.4g} against a level {1 - c.confidence:g} spent over the sample's "
                     f"candidates{need}")
    if c.unscreened:
        where = f"of the archive {c.archive}" if c.archive else "the store knows of"
        lines.append(f"not screened: {plural(c.unscreened, 'spectrum', 'spectra')} {where} "
                     f"{'has' if c.unscreened == 1 else 'have'} no verdict for the task; the test covers the "
                     f"{c.screened:,} screened only"
                     + ("" if not c.covered else " (they alone would pass it)"))
    if c.bound is not None:
        lines.append(f"bound: at most {percent(c.bound)} of all candidates are unread ({percent(c.confidence)} "
                     "confidence)")
    if c.miss_rate is not None:
        if c.threshold is not None:
            lines.append(f"next archive: read p_yes >= {c.threshold:g}; at most {c.miss_rate:.0%} of its candidates "
                         f"below ({c.confidence:.0%} confidence), if it is exchangeable with this one (same survey, "
                         "task and model)")
        else:
            lines.append("next archive: no threshold — " + (c.threshold_note or (
                f"the audit must find {c.threshold_positives_needed} more candidates")))
    return "\n".join(lines)


def _archive(store: VettingStore, archive: str | None) -> tuple[str | None, list[str] | None]:
    """The archive folder whose spectra must all be screened and their store keys (`archive_keys`): ``--archive``,
    else the one the store names (said on stderr), else (None, None): the spectra the store knows of."""
    if not archive:
        named = store.get_state(ARCHIVE_ROOT_STATE)
        if not isinstance(named, str) or not named:
            return None, None
        if not Path(named).is_dir():
            print(f"the archive this store was made for, {named}, is not there: counting only the spectra the store "
                  "knows of (--archive DIR names the archive; a moved one: spec-o3 store relocate)", file=sys.stderr)
            return None, None
        print(f"archive: {named} (the one the store was made for; --archive names another)", file=sys.stderr)
        archive = named
    index = open_archive(archive)
    try:
        return index.root, archive_keys(index)
    finally:
        index.close()


def _assess(store: VettingStore, args: argparse.Namespace, root: str | None, keys: list[str] | None,
            miss_rate: float | None = None) -> Certificate:
    cert = assess(store, _task(store, args.task), args.recall, args.confidence, miss_rate, archive=keys)
    cert.archive = root
    return cert


def cmd_triage(args: argparse.Namespace) -> int:
    try:
        check_target(args.recall, args.confidence)
    except ValueError as exc:
        raise StoreError(str(exc)) from None
    if args.miss_rate is not None and not 0 < args.miss_rate < 1:
        raise StoreError(f"--miss-rate must be in (0, 1), got {args.miss_rate}")
    if args.seed is not None and args.draw is None:
        raise StoreError("--seed goes with --draw")
    if args.draw is not None:
        if args.draw <= 0:
            raise StoreError(f"--draw needs a positive number of spectra, got {args.draw}")
        with VettingStore(args.store) as store:
            task = _task(store, args.task)
            root, keys = _archive(store, args.archive)
            before = _assess(store, args, root, keys)
            if before.unscreened:
                raise StoreError(f"{plural(before.unscreened, 'spectrum', 'spectra')} of the "
                                 f"{'archive' if root else 'store'} "
                                 f"{'has' if before.unscreened == 1 else 'have'} no verdict for task {task!r}: "
                                 "screen them (spec-o3 vet) before drawing the audit sample (spectra screened after "
                                 "the draw are outside it)")
            draw(store, task, args.draw, args.seed, recall=args.recall, confidence=args.confidence,
                 vetter=login_vetter(args.vetter))
            cert = _assess(store, args, root, keys, args.miss_rate)
    else:
        with VettingStore(args.store, readonly=True) as store:
            _task(store, args.task)  # a wrong task is refused before the archive is indexed
            root, keys = _archive(store, args.archive)
            cert = _assess(store, args, root, keys, args.miss_rate)
    print(json.dumps(cert.to_json(), indent=1) if args.json else report_text(cert))
    return 0 if cert.verdict == "stop" else EXIT_CONTINUE


__all__ = ["EXIT_CONTINUE", "cmd_triage", "register", "report_text"]
