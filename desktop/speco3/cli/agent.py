"""``spec-o3 inspect``, ``spec-o3 vet`` and ``spec-o3 export``: the model path from the command line.

- ``inspect FILE[#N] --task cv`` runs one episode, streams the reasoning to stdout as it is generated, saves each
  image the model saw beside a JSON trace (``--out DIR``), prints the verdict. Exit status 0 with a verdict,
  3 without one, 130 when interrupted.
- ``vet DIR|INDEX --task cv --out results.sqlite`` screens an archive (indexed through `speco3.spectra.ArchiveIndex`)
  with a progress bar on stderr; resumable (spectra done with the same model and prompt version are skipped,
  unless their file changed: size/mtime against a stamp in the store, then sha256);
  Ctrl-C stops cleanly after the current token, and the next run continues.
- ``export results.sqlite --csv/--votable/--fits/--html OUT`` writes the tables and the audit report.

Models: ``--model NAME`` (installed in the model store; default: the store's default model) or explicit
``--text GGUF --mmproj GGUF``. The hidden ``--scripted FILE`` replays a JSON script instead of a model
(`speco3.engine.scripted.load_script`), for tests and the robustness suite.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from speco3.errors import Speco3Error

log = logging.getLogger(__name__)

EXIT_NO_VERDICT = 3
EXIT_INTERRUPTED = 130


# -- shared options ------------------------------------------------------------------------------------------
def _model_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", metavar="NAME", help="installed model (default: the model store's default)")
    g.add_argument("--text", metavar="GGUF", help="text model GGUF (with --mmproj)")
    g.add_argument("--mmproj", metavar="GGUF", help="vision projector GGUF (with --text)")
    g.add_argument("--scripted", metavar="FILE", help=argparse.SUPPRESS)
    g.add_argument("--n-ctx", type=int, help="context window in KV cells (default: the engine default)")
    g.add_argument("--threads", type=int, help="CPU threads (default: physical cores)")
    g.add_argument("--n-gpu-layers", type=int, help="layers on the GPU (default: all when supported)")
    g.add_argument("--image-max-tokens", type=int, help="cap on image tokens per image (default 1280, above the "
                   "renderer's views; lower saves memory)")
    g.add_argument("--kv-type", choices=("f16", "q8_0"), default="f16",
                   help="KV cache type: q8_0 halves its memory (cost on the logits: benchmarks/bench_load.py)")
    g.add_argument("--mmap", dest="use_mmap", action=argparse.BooleanOptionalAction, default=None,
                   help="map the model file (fast load, llama.cpp's default) or read it (--no-mmap: slower, lower "
                   "peak); default: map when free memory holds the file beside the loaded weights")
    g.add_argument("--parallel", type=int, metavar="N", help="sequences decoded together (rollouts of a spectrum, "
                   "spectra of `vet --slots`) sharing the context's KV cells (default: 4; 1: one at a time)")
    g.add_argument("--lora", action="append", metavar="FILE[:SCALE]", default=[],
                   help="apply a LoRA adapter GGUF (spec-o3 convert-lora) at SCALE (default 1); repeatable; refused "
                   "when it was made for another base model")
    g.add_argument("--max-turns", type=int, help="assistant-turn budget (default: the budget the model was trained with)")
    g.add_argument("--max-tokens-per-turn", type=int, help="generation cap per assistant turn (default: the engine's)")
    from speco3.cli.server import server_options

    server_options(p)


def engine_settings(args):
    from speco3.cli.confidence import top_logprobs
    from speco3.engine.base import EngineSettings, LoraAdapter

    settings = EngineSettings(n_threads=args.threads, n_gpu_layers=args.n_gpu_layers,
                              image_max_tokens=args.image_max_tokens, top_logprobs=top_logprobs(args),
                              kv_type=getattr(args, "kv_type", "f16"), use_mmap=getattr(args, "use_mmap", None))
    settings.lora = tuple(LoraAdapter.parse(spec) for spec in getattr(args, "lora", ()))
    if settings.lora and getattr(args, "server", None):
        raise Speco3Error("--lora applies adapters in the local llama.cpp engine; a chat server (--server) loads "
                          "its adapters itself (llama-server --lora, vLLM --lora-modules)")
    if args.n_ctx is not None:
        settings.n_ctx = args.n_ctx
    if args.parallel is not None:
        settings.n_seq = max(1, args.parallel)
    slots = getattr(args, "slots", None)
    if slots is not None and slots > settings.n_seq:
        settings.n_seq = slots
    if getattr(args, "max_tokens_per_turn", None):
        settings.max_tokens_per_turn = args.max_tokens_per_turn
    return settings


def open_cli_engine(args, *, load: bool = True):
    """The engine the options ask for (scripted, explicit files, or an installed model); ``load=False`` opens it
    without loading the model yet (its `ModelInfo` is known: `load_cli_engine` loads it later)."""
    settings = engine_settings(args)
    if getattr(args, "server", None):
        from speco3.cli.server import open_server_engines

        return open_server_engines(args, settings, 1)[0]
    if args.scripted:
        from speco3.engine.scripted import load_script

        engine = load_script(args.scripted, settings=settings)
        if load:
            engine.load()
        return engine
    if bool(args.text) != bool(args.mmproj):
        raise Speco3Error("--text and --mmproj go together (the text GGUF and its vision projector)")
    from speco3.engine import open_engine

    engine = open_engine((args.text, args.mmproj) if args.text else args.model, settings, load=False)
    if load:
        load_cli_engine(engine)
    return engine


def load_cli_engine(engine) -> None:
    """Load an engine `open_cli_engine` opened with ``load=False``, saying so on stderr; closed if it fails."""
    from speco3.engine.scripted import ScriptedEngine

    if isinstance(engine, ScriptedEngine):
        engine.load()
        return
    print("loading the model …", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        engine.load()
    except BaseException:
        engine.close()
        raise
    stats = engine.stats()
    print(f"loaded {engine.info.model_id} ({stats.backend}) in {time.perf_counter() - t0:.1f} s: "
          f"{stats.extra.get('fit', '')}", file=sys.stderr)
    for note in stats.extra.get("fit_notes", ()):  # a lowered context, layers left on the CPU: say so
        print(f"note: {note}", file=sys.stderr)
    return engine


def fill_model_digests(info) -> None:
    """Put the sha256 of explicitly given model files into ``info`` (cached by path, size and mtime)."""
    from speco3.config import cache_dir
    from speco3.vetting.batch import file_sha256

    cache_path = cache_dir() / "model-sha256.json"
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    changed = False
    for attr, path_attr in (("text_sha256", "text_path"), ("mmproj_sha256", "mmproj_path")):
        path = getattr(info, path_attr, None)
        if getattr(info, attr, None) or not path:
            continue
        st = Path(path).stat()
        key = f"{Path(path).resolve()}|{st.st_size}|{st.st_mtime_ns}"
        if key not in cache:
            print(f"hashing {Path(path).name} …", file=sys.stderr, flush=True)
            cache[key] = file_sha256(path)
            changed = True
        setattr(info, attr, cache[key])
    if changed:
        with contextlib.suppress(OSError):
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            cache_path.write_text(json.dumps(cache, indent=1), encoding="utf-8")


def default_render():
    """The training-faithful renderer (``speco3.render``) as a `speco3.agent.tool.RenderFn` (``View -> RenderedImage``)."""
    try:
        from speco3.render import render_view
    except ImportError as exc:
        raise Speco3Error(f"the spectrum renderer is not available ({exc})") from exc
    return render_view  # the pixels go to the model's image directly; no PNG is encoded for it


# Tests replace this to run without Qt.
RENDER_FACTORY = default_render


@contextlib.contextmanager
def sigint_cancels(cancel: threading.Event):
    """While active, the first Ctrl-C sets ``cancel`` (a clean stop); a second one interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("\nstopping after the current token … (Ctrl-C again to abort)", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def register(sub) -> None:
    from speco3.cli.confidence import rollout_options

    p = sub.add_parser("inspect", help="run the model on one spectrum and stream its reasoning")
    p.add_argument("address", metavar="FILE[#N]", help="spectrum file, or FILE#N for the N-th spectrum in it")
    p.add_argument("--task", required=True, help="task id (cv, carbon, ss, gm, wd, or a user task)")
    p.add_argument("--out", metavar="DIR", help="trace folder (default: ./spec-o3-<name>-<task>)")
    p.add_argument("--quiet", action="store_true", help="do not stream the reasoning")
    p.add_argument("--json", action="store_true", help="print the verdict and its confidence as JSON on stdout")
    _model_options(p)
    rollout_options(p)
    p.set_defaults(func=cmd_inspect)

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
    v.add_argument("--snr-min", type=float)
    v.add_argument("--match", metavar="TEXT", help="only spectra whose key, object id, class or note contain TEXT")
    v.add_argument("--concurrency", type=int, default=1, metavar="N",
                   help="with --server: keep N episodes in flight (the server batches them; default 1)")
    _model_options(v)
    rollout_options(v)
    v.set_defaults(func=_cmd_vet)

    e = sub.add_parser("export", help="export a vetting store as CSV, VOTable, FITS or an HTML report")
    e.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    e.add_argument("--csv", metavar="OUT")
    e.add_argument("--votable", metavar="OUT")
    e.add_argument("--fits", metavar="OUT")
    e.add_argument("--html", metavar="OUT", help="HTML audit report: a folder (existing, or ending in /) gets "
                                                 "OUT/index.html; any other OUT is written as OUT.html")
    e.add_argument("--task", help="only this task")
    e.add_argument("--copy-images", action="store_true", help="HTML: copy images beside the report (default: embed)")
    e.set_defaults(func=cmd_export)


# -- inspect -------------------------------------------------------------------------------------------------
def _info_dict(info) -> dict:
    from dataclasses import asdict, is_dataclass

    return asdict(info) if is_dataclass(info) else dict(vars(info))


def _safe_name(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[:80]


def cmd_inspect(args) -> int:
    from speco3.agent import (
        MAX_TURNS,
        AssistantStep,
        Outcome,
        PromptStep,
        ToolStep,
        Trace,
        VerdictStep,
        get_task,
        run_episode,
    )
    from speco3.agent.eta import Rates, TimeToVerdict, format_eta
    from speco3.agent.trace import spectrum_ref
    from speco3.cli.confidence import cmd_inspect_rollouts, plan_and_thresholds
    from speco3.spectra import read_spectrum

    task = get_task(args.task)
    plan, _ = plan_and_thresholds(args)
    spectrum = read_spectrum(args.address)
    render = RENDER_FACTORY()
    engine = open_cli_engine(args)
    out = Path(args.out) if args.out else Path.cwd() / f"spec-o3-{_safe_name(spectrum.name)}-{task.id}"
    if plan is not None or args.json:
        return cmd_inspect_rollouts(args, task, spectrum, engine, render, out)
    trace = Trace(task_id=task.id, task_text=task.text, prompt_version=task.prompt_version,
                  spectrum=spectrum_ref(spectrum), model=_info_dict(engine.info), settings=engine.settings.to_dict())
    stream = None if args.quiet else (lambda piece: (sys.stdout.write(piece), sys.stdout.flush()))
    cancel = threading.Event()
    final = None
    max_turns = MAX_TURNS if args.max_turns is None else args.max_turns
    print(f"{spectrum.name} · task {task.id} ({task.target_class}) · model {engine.info.model_id}", flush=True)
    eta = TimeToVerdict(rates=Rates.from_stats(engine.stats()), max_turns=max_turns)
    try:
        with sigint_cancels(cancel):
            for step in trace.follow(run_episode(engine, spectrum, task, render, cancel=cancel, on_token=stream,
                                                 max_turns=max_turns)):
                eta.observe(step, engine.stats() if isinstance(step, AssistantStep) else None)
                if isinstance(step, PromptStep):
                    print(f"[full view {step.image.width}×{step.image.height} px, {step.image.n_tokens} image tokens]")
                elif isinstance(step, AssistantStep) and not args.quiet:
                    print(f"\n[turn {step.turn}: {step.n_tokens} tokens, {step.tokens_per_s:.1f} tok/s · "
                          f"{format_eta(eta.remaining())}]", flush=True)
                elif isinstance(step, ToolStep):
                    rng = step.wavelength_range
                    what = f"{rng[0]:g}–{rng[1]:g} Å" if rng else "?"
                    print(f"[zoom {what}{': ' + step.label if step.label else ''}] {step.response_text}", flush=True)
                elif isinstance(step, VerdictStep):
                    final = step
    finally:
        engine.close()
    trace.save(out)
    print(f"\ntrace: {out}")
    if final is None:  # pragma: no cover - run_episode always ends with a VerdictStep
        raise Speco3Error("the episode ended without a verdict record")
    if final.outcome.has_verdict:
        print(f"Verdict: {final.verdict} ({task.target_class}) — {final.turns} turns, {final.zooms} zooms, "
              f"{final.tokens_generated} tokens, {final.seconds:.1f} s"
              + ("" if final.strict else f" [answer read by fallback: {final.method}]"))
        return 0
    print(f"No verdict: {final.outcome.value} — {final.detail}")
    return EXIT_INTERRUPTED if final.outcome is Outcome.CANCELLED else EXIT_NO_VERDICT


# -- export --------------------------------------------------------------------------------------------------
def _cmd_vet(args) -> int:
    from speco3.cli.vet import cmd_vet  # its own module (it imports this one)

    return cmd_vet(args)


def cmd_export(args) -> int:
    from speco3.vetting import VettingStore
    from speco3.vetting.export import export
    from speco3.vetting.report import write_report

    targets = [(fmt, getattr(args, fmt)) for fmt in ("csv", "votable", "fits", "html") if getattr(args, fmt)]
    if not targets:
        raise Speco3Error("nothing to export: give --csv, --votable, --fits and/or --html OUT")
    with VettingStore(args.store, readonly=True) as store:
        for fmt, out in targets:
            if fmt == "html":
                out = write_report(store, out, task=args.task, embed_images=not args.copy_images)
            else:
                export(store, out, fmt, task=args.task)
            print(f"{fmt}: wrote {out}")
    return 0
