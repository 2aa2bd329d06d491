"""``spec-o3 vet``: screen an archive with the model, resumably, one spectrum at a time, N at once in parallel
sequences (``--slots``), K rollouts each (``--rollouts``), or on a model server (``--server --concurrency``); a share
of it (``--shard I/N``). The options are registered with the model options in `speco3.cli.agent`; the render
function and the engine openers are read from there at call time (tests replace ``RENDER_FACTORY``)."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from speco3.cli import agent as _agent
from speco3.errors import Speco3Error


class ProgressBar:
    """A one-line progress display on stderr (one line per item when stderr is not a terminal)."""

    def __init__(self, total: int, stream=None):
        self.total = max(total, 0)
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()
        self.ran = 0
        self.counts: dict[str, int] = {}
        self.last = "skipped (done before)"

    def record(self, item, verdict) -> None:
        """The batch's ``on_item``: tally the outcome of the item just screened (None: skipped)."""
        self.last = verdict.outcome if verdict is not None else "skipped (done before)"
        if verdict is not None:
            self.ran += 1
            self.counts[verdict.outcome] = self.counts.get(verdict.outcome, 0) + 1
            if verdict.abstained:
                conf = verdict.confidence()
                self.last += f" (abstained: {conf.abstain_reason})" if conf is not None else " (abstained)"
                self.counts["abstained"] = self.counts.get("abstained", 0) + 1

    def __call__(self, key: str, i: int, total: int) -> None:
        """The batch's ``progress``: redraw the line (or print one line per item without a terminal)."""
        elapsed = time.perf_counter() - self.t0
        per = elapsed / self.ran if self.ran else 0.0
        eta = per * (self.total - i) if self.ran else 0.0
        width = 24
        filled = int(width * i / self.total) if self.total else width
        tally = " ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        line = (f"[{'#' * filled}{'.' * (width - filled)}] {i}/{self.total} {tally} | "
                f"{per:.1f} s/spectrum | ETA {eta / 60:.1f} min")
        if self.tty:
            self.stream.write("\r" + line[:160].ljust(160))
        else:
            self.stream.write(f"{i}/{self.total} {key}: {self.last}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _archive_entries(args):
    """Index entries to screen, from an archive folder (scanned incrementally) or an index database."""
    from speco3.spectra import ArchiveIndex
    from speco3.vetting.batch import parse_shard

    try:  # a bad --shard is refused before any indexing
        shard = parse_shard(args.shard) if getattr(args, "shard", None) else None
    except ValueError as exc:
        raise Speco3Error(str(exc)) from None
    path = Path(args.archive).expanduser()
    if path.is_dir():
        index = ArchiveIndex.for_root(path)

        tty = sys.stderr.isatty()

        def progress(rel: str, done: int, total: int) -> None:
            if tty:
                print(f"\rindexing {done}/{total} files", end="", file=sys.stderr, flush=True)

        summary = index.scan(path, progress=progress)
        print(f"{chr(13) if tty else ''}indexed {summary.files_seen} files ({summary.files_read} read, {summary.errors} unreadable)",
              file=sys.stderr)
    elif path.is_file():
        index = ArchiveIndex(path)
        if index.root is None:
            index.close()
            raise Speco3Error(f"{path}: not an archive index (no archive root recorded)")
    else:
        raise Speco3Error(f"{path}: no such archive folder or index")
    try:
        entries = index.query(survey=args.survey, cls=args.cls, snr_min=args.snr_min, text=args.match, sort="key",
                              limit=None if shard else args.limit)
    finally:
        index.close()
    if shard:  # the share first, then the limit: --limit counts this shard's spectra
        from speco3.vetting.batch import in_shard

        entries = [e for e in entries if in_shard(e.key, shard)][:args.limit]
    return entries


def _all_done(items, store, task, model_id: str, plan) -> bool:
    """Whether `vet` would skip every item (the batch's own "already done" rule, `DoneCheck`)."""
    from speco3.vetting.batch import DoneCheck

    check = DoneCheck(store, task, model_id, rollouts=plan.k if plan is not None else 1)
    return all(check.state(item.key, item.path) == "done" for item in items)


def cmd_vet(args) -> int:
    from speco3.agent import get_task
    from speco3.cli.confidence import plan_and_thresholds
    from speco3.vetting import VettingStore
    from speco3.vetting.batch import BatchResult, VetItem, vet_batch

    task = get_task(args.task)
    plan, thresholds = plan_and_thresholds(args)
    entries = _archive_entries(args)
    items = [VetItem(key=f"{e.path}#{e.index}", load=e.load, path=e.path, name=e.name, error=e.error)
             for e in entries]
    store_path = Path(args.out)
    traces = Path(args.traces) if args.traces else store_path.with_name(store_path.stem + "_traces")
    summary = {"store": str(store_path), "traces": str(traces), "task": task.id, "prompt_version": task.prompt_version,
               "shard": args.shard, "rollouts": plan.k if plan else 1}
    if not items:  # the same summary as a run (a shard of a SLURM array may be empty): scripts parse every shard
        VettingStore(store_path).close()  # and the store it names exists, so `merge … part*.sqlite` takes them all
        print(f"nothing to screen in shard {args.shard}: none of the matching spectra falls in it" if args.shard
              else "nothing to screen: the archive has no spectra matching the filters", file=sys.stderr)
        print(json.dumps({**summary, **BatchResult().to_dict()}))
        return 0
    render = _agent.RENDER_FACTORY()
    new_store = not store_path.exists()
    store = VettingStore(store_path)
    try:
        if args.concurrency > 1 and not args.server:
            raise Speco3Error("--concurrency needs --server URL (a model server batches the episodes)")
        if args.server:
            from speco3.cli.server import open_server_engines

            engines = open_server_engines(args, _agent.engine_settings(args), max(1, args.concurrency), check=True)
        else:
            engines = [_agent.open_cli_engine(args, load=False)]
            if not args.no_resume and _all_done(items, store, task, engines[0].info.model_id, plan):
                engines[0].close()
                store.close()
                print(f"all {len(items)} spectra were screened before with {engines[0].info.model_id}, this task and "
                      "prompt version: nothing to do, the model was not loaded (--no-resume screens them again)",
                      file=sys.stderr)
                print(json.dumps({**summary, **BatchResult(total=len(items), skipped=len(items)).to_dict()}))
                return 0
            _agent.load_cli_engine(engines[0])
    except BaseException:  # no model, nothing screened: a store this run created is not left behind empty
        store.close()
        if new_store:
            for p in (store_path, *(store_path.with_name(store_path.name + s) for s in ("-wal", "-shm"))):
                p.unlink(missing_ok=True)
        raise
    cancel = threading.Event()
    bar = ProgressBar(len(items))
    try:
        _agent.fill_model_digests(engines[0].info)
        with _agent.sigint_cancels(cancel):
            if len(engines) > 1:
                from speco3.vetting.concurrent import vet_concurrent

                if _agent.RENDER_FACTORY is _agent.default_render:  # Qt must exist before worker threads render
                    from speco3.render import init_qt

                    init_qt()

                result = vet_concurrent(items, store, engines, task, render, trace_root=traces, cancel=cancel,
                                        progress=bar, on_item=bar.record, resume=not args.no_resume, plan=plan,
                                        thresholds=thresholds)
            else:
                result = vet_batch(items, store, engines[0], task, render, trace_root=traces, cancel=cancel,
                                   progress=bar, on_item=bar.record, resume=not args.no_resume, plan=plan,
                                   thresholds=thresholds, slots=args.slots or engines[0].settings.n_seq)
    finally:
        bar.close()
        for engine in engines:
            engine.close()
        store.close()
    print(json.dumps({**summary, **result.to_dict()}))
    if result.cancelled:
        print("stopped; run the same command again to continue", file=sys.stderr)
        return _agent.EXIT_INTERRUPTED
    return 0


__all__ = ["ProgressBar", "cmd_vet"]
