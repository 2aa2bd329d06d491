"""``spec-o3 vet``: screen an archive with the model, resumably, one spectrum at a time, N at once in parallel
sequences (``--slots``), K rollouts each (``--rollouts``), or on a model server (``--server --concurrency``); a share
of it (``--shard I/N``); without a model, ``--demo`` screens the demo archive with the scripted demo session
(`speco3.demo`: recorded as the scripted demo, not a model; any other spectrum is refused). The run goes through the screening core (`speco3.vetting.screening`) with the scheduler
the options ask for (`speco3.vetting.schedulers`); the progress line is drawn from its events.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from speco3.agent.tasks import get_task
from speco3.cli.archive import open_archive
from speco3.cli.options import (
    EXIT_INTERRUPTED,
    check_demo_run,
    demo_cli_engine,
    fill_model_digests,
    load_cli_engine,
    model_choice,
    model_options,
    open_cli_engine,
    renderer,
    rollout_options,
    run_settings,
    sigint_cancels,
)
from speco3.cli.progress import ProgressBar
from speco3.cli.server import open_server_engines
from speco3.demo import demo_refusal
from speco3.engine.base import Engine
from speco3.engine.choice import DEMO, SCRIPTED_LABEL
from speco3.errors import Speco3Error
from speco3.spectra.index import IndexEntry
from speco3.vetting.schedulers import choose, engine_per_item, on_threads
from speco3.vetting.screening import BatchResult, Scheduler, Screening, VetItem, in_shard, parse_shard, vet
from speco3.vetting.store import ARCHIVE_ROOT_STATE, VettingStore, read_only_place
from speco3.vetting.trace_roots import adopt_traces


def register(sub) -> None:
    v = sub.add_parser(
        "vet", help="screen an archive with the model (resumable)",
        description="Screen an archive with the model; every verdict goes to STORE at once. Resuming: a spectrum "
        "already screened for this task with the same model and prompt version is skipped, unless its file "
        "changed since. The file check is cheap: size and modification time against what the store noted when it "
        "last hashed the file; only when they differ (or the file was modified within 2 s of that hash, when a "
        "same-size rewrite could keep the time) is the file hashed again, and a sha256 other than the one the "
        "verdict was made on screens the spectrum again. Runs that were cancelled or hit an engine error are "
        "always retried.")
    v.add_argument("archive", metavar="DIR|INDEX", help="archive folder, or an index database of one")
    v.add_argument("--task", required=True, help="task id")
    v.add_argument("--out", required=True, metavar="STORE", help="vetting store (SQLite), e.g. results.sqlite")
    v.add_argument("--traces", metavar="DIR", help="trace folder (default: <STORE stem>_traces beside the store)")
    v.add_argument("--no-resume", action="store_true",
                   help="run again on spectra already done, changed or not")
    v.add_argument("--limit", type=int, help="screen at most this many spectra")
    v.add_argument("--shard", metavar="I/N", help="screen only share I of N (0 <= I < N), chosen by a hash of each "
                   "spectrum's archive key: N jobs (a SLURM array, several machines) split the archive without "
                   "overlap; merge their stores with 'spec-o3 merge'")
    v.add_argument("--slots", type=int, metavar="N", help="spectra screened at once, advanced together by one batched "
                   "decode (default: --parallel's value, 4; 1: one at a time, in order)")
    v.add_argument("--survey")
    v.add_argument("--cls", help="catalogue class filter (STAR, GALAXY, QSO, ...)")
    v.add_argument("--snr-min", type=float, help="minimum S/N 4000–8000 Å (ours, one definition for every survey)")
    v.add_argument("--match", metavar="TEXT", help="only spectra whose key, object id, class or note contain TEXT")
    v.add_argument("--include-unusable", action="store_true",
                   help="also screen sky fibres and spectra whose every pixel is masked (left out by default, as in "
                   "the app's queue)")
    v.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="with --server: keep N episodes in flight (the server batches them; default 1)")
    model_options(v, demo=True)
    rollout_options(v)
    v.set_defaults(func=cmd_vet)


def _archive_entries(args: argparse.Namespace) -> tuple[list[IndexEntry], str | None]:
    """Index entries to screen, from an archive folder (scanned incrementally) or an index database, and the
    archive's root folder."""
    try:  # a bad --shard is refused before any indexing
        shard = parse_shard(args.shard) if args.shard else None
    except ValueError as exc:
        raise Speco3Error(str(exc)) from None
    index = open_archive(args.archive)
    index_root = index.root
    try:
        entries = index.query(survey=args.survey, cls=args.cls, snr_min=args.snr_min, text=args.match, sort="key",
                              usable=None if args.include_unusable else True, limit=None if shard else args.limit)
    finally:
        index.close()
    if shard:  # the share first, then the limit: --limit counts this shard's spectra
        entries = [e for e in entries if in_shard(e.key, shard)][:args.limit]
    return entries, index_root


def _all_done(screening: Screening, items: list[VetItem], model_id: str) -> bool:
    """Whether `vet` would skip every item (the core's own done rule)."""
    check = screening.done_check(model_id)
    return all(check.state(item.key, item.path) == "done" for item in items)


def _check_writable(store_path: Path) -> None:
    """Refuse a store that cannot be written there before the model loads (`read_only_place`, as the store says)."""
    why = read_only_place(store_path.absolute())
    if why:
        raise Speco3Error(f"{store_path}: cannot write the vetting store there: {why}")


def _demo_items(items: list[VetItem]) -> None:
    """``--demo``: refuse the run when a spectrum is not one of the demo archive's (the first one, with why)."""
    for item in items:
        if (why := demo_refusal(_file_name(item))) is not None:
            raise Speco3Error(f"--demo: {why}")


def _file_name(item: VetItem) -> str | None:
    return Path(item.path).name if item.path else None


def cmd_vet(args: argparse.Namespace) -> int:
    task = get_task(args.task)
    settings = run_settings(args, task)
    plan = settings.plan()
    demo = model_choice(args) is DEMO
    if demo:
        check_demo_run(settings)
    entries, index_root = _archive_entries(args)
    items = [VetItem.of_entry(e) for e in entries]
    if demo:
        _demo_items(items)
    store_path = Path(args.out)
    # absolute: the app finds them wherever it is started (the store's verdicts name their trace folders)
    traces = (Path(args.traces) if args.traces else store_path.with_name(store_path.stem + "_traces")).absolute()
    summary = {"store": str(store_path), "traces": str(traces), "task": task.id, "prompt_version": task.prompt_version,
               "shard": args.shard, "rollouts": plan.k if plan else 1}
    if demo:
        summary["model"] = SCRIPTED_LABEL
    if not items:  # the same summary as a run (a shard of a SLURM array may be empty): scripts parse every shard
        VettingStore(store_path).close()  # and the store it names exists, so `merge … part*.sqlite` takes them all
        print(f"nothing to screen in shard {args.shard}: none of the matching spectra falls in it" if args.shard
              else "nothing to screen: the archive has no spectra matching the filters", file=sys.stderr)
        print(json.dumps({**summary, **BatchResult().to_dict()}))
        return 0
    render = renderer(args)
    cancel = threading.Event()
    # A store that does not exist yet is created once the model is loaded: a run that fails before leaves nothing
    # behind, and never removes a store that another run, started at the same moment, created and writes to.
    store = VettingStore(store_path) if store_path.exists() else None
    if store is None:
        _check_writable(store_path)  # before minutes of model loading
    engines: list[Engine] = []
    try:
        if args.concurrency > 1 and not args.server:
            raise Speco3Error("--concurrency needs --server URL (a model server batches the episodes)")
        if args.server:
            engines = open_server_engines(args, settings.engine, max(1, args.concurrency), check=True)
            served = engines[0].recorded_settings().get("server_reports") or {}
            print(f"server model {engines[0].info.model_id}: recorded as the server reports it (context "
                  f"{served.get('n_ctx') or 'unreported'} per conversation, {served.get('slots') or 'unreported'} "
                  f"slots, file type {served.get('quant') or 'unreported'}); file digests: unknown, not verified",
                  file=sys.stderr)
        elif demo:  # an engine per spectrum (its own script), opened by the scheduler
            if store is not None and not args.no_resume and _all_done(
                    Screening(store, task, render, plan=plan), items, SCRIPTED_LABEL):
                store.close()
                print(f"all {len(items)} spectra were screened before by the scripted demo session: nothing to do "
                      "(--no-resume screens them again)", file=sys.stderr)
                print(json.dumps({**summary, **BatchResult(total=len(items), skipped=len(items)).to_dict()}))
                return 0
            print(f"{SCRIPTED_LABEL}: the scripted demo session answers from the demo catalogue's ground truth; "
                  "its verdicts are recorded as such, never as a model's", file=sys.stderr)
        else:
            engines = [open_cli_engine(args, settings, load=False)]
            if store is not None and not args.no_resume and _all_done(
                    Screening(store, task, render, plan=plan), items, engines[0].info.model_id):
                engines[0].close()
                store.close()
                print(f"all {len(items)} spectra were screened before with {engines[0].info.model_id}, this task and "
                      "prompt version: nothing to do, the model was not loaded (--no-resume screens them again)",
                      file=sys.stderr)
                print(json.dumps({**summary, **BatchResult(total=len(items), skipped=len(items)).to_dict()}))
                return 0
            load_cli_engine(engines[0], args)
        if store is None:
            store = VettingStore(store_path)
    except BaseException:
        for engine in engines:
            engine.close()
        if store is not None:
            store.close()
        raise
    if index_root:
        store.set_state(ARCHIVE_ROOT_STATE, index_root)  # reports are titled by it
    try:
        traces.mkdir(parents=True, exist_ok=True)  # made here, not by the first trace: its folder is checked now
    except OSError as exc:
        store.close()
        for engine in engines:
            engine.close()
        raise Speco3Error(f"{traces}: cannot make the trace folder ({exc.strerror or exc})") from None
    if note := adopt_traces(traces, store_path):  # outside the store's folder: trusted in the user's config
        print(note, file=sys.stderr)
    screening = Screening(store, task, render, trace_root=traces, plan=plan, thresholds=settings.thresholds(),
                          resume=not args.no_resume, cancel=cancel)
    bar = ProgressBar(len(items))
    try:
        scheduler: Scheduler
        if not demo:
            fill_model_digests(engines[0].info)
        if demo:
            scheduler = engine_per_item(lambda item: demo_cli_engine(_file_name(item), task))
        elif len(engines) > 1:
            if vars(args).get("render") is None:  # Qt must exist before worker threads render
                from speco3.render import init_qt  # Qt: only for a real render on threads

                init_qt()
            scheduler = on_threads(engines)
        else:
            scheduler = choose(engines[0], args.slots or engines[0].settings.n_seq, plan)
        with sigint_cancels(cancel):
            result = vet(screening, items, scheduler, SCRIPTED_LABEL if demo else engines[0].info.model_id,
                         on_event=bar.event)
    finally:
        bar.close()
        for engine in engines:
            engine.close()
        store.close()
    print(json.dumps({**summary, **result.to_dict()}))
    if result.cancelled:
        print("stopped; run the same command again to continue", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


__all__ = ["cmd_vet", "register"]
