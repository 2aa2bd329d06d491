"""What the model commands (``inspect``, ``vet``, ``evaluate``) share: the model and rollout options, the one
settings object they build (`run_settings`), the engine they open, the renderer, Ctrl-C and the exit codes.

A leaf: it imports no other command module. The renderer comes in through `speco3.cli.main` (``render=``; tests
pass a small Pillow one) and reaches the commands as ``args.render``; by default the training-faithful one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from speco3.agent.adaptive import DEFAULT_K_MAX
from speco3.agent.confidence import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_ANSWERED
from speco3.agent.settings import DEFAULT_TOP_LOGPROBS, RolloutSettings, RunSettings
from speco3.agent.tasks import Task, run_adapters
from speco3.agent.tool import RenderFn
from speco3.cli.server import open_server_engines, server_config, server_options
from speco3.demo import demo_file_engine, demo_refusal
from speco3.engine.base import Engine, EngineSettings, LoraAdapter, ModelInfo
from speco3.engine.choice import (
    DEMO,
    SCRIPTED_LABEL,
    FilePair,
    InstalledModel,
    ModelChoice,
    ModelServer,
    Scripted,
)
from speco3.errors import Speco3Error
from speco3.spectra.model import Spectrum
from speco3.vetting.screening import file_sha256

if TYPE_CHECKING:  # Qt: the renderer is imported only by the commands that render
    from speco3.render import RenderedImage
    from speco3.spectra.view import View

EXIT_NO_VERDICT = 3
EXIT_INTERRUPTED = 130


def model_options(p: argparse.ArgumentParser, *, demo: bool = False) -> None:
    """The model options; ``demo``: also ``--demo`` (the commands that run the agent per spectrum)."""
    g = p.add_argument_group("model")
    if demo:
        g.add_argument("--demo", action="store_true",
                       help=f"run the scripted demo session instead of a model (no model needed): canned text and the "
                       f"demo catalogue's ground truth, recorded as '{SCRIPTED_LABEL}'; only on the demo archive's "
                       "spectra (spec-o3 demo writes them), any other spectrum is refused")
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
                   "when it was made for another base model. Default: the task's own adapter (its file's \"lora\" "
                   "field); --lora none runs the base model")
    g.add_argument("--max-turns", type=int, help="assistant-turn budget (default: the budget the model was trained with)")
    g.add_argument("--max-tokens-per-turn", type=int, help="generation cap per assistant turn (default: the engine's)")
    server_options(p)


def rollout_options(p: argparse.ArgumentParser) -> None:
    """The ``--rollouts`` options of ``inspect``, ``vet`` and ``evaluate``."""
    g = p.add_argument_group("confidence (K sampled rollouts per spectrum)")
    g.add_argument("--rollouts", type=rollouts_arg, default=1, metavar="K|auto",
                   help="sampled episodes per spectrum (default 1: one greedy run, the paper's evaluation); 'auto': "
                   "2, then more only while the decision is not settled, up to --max-rollouts")
    g.add_argument("--max-rollouts", type=int, default=DEFAULT_K_MAX, metavar="N",
                   help=f"the budget of --rollouts auto (default {DEFAULT_K_MAX}, the training group size)")
    g.add_argument("--temperature", type=float,
                   help="sampling temperature (default: 0 for K=1, 1.0 — the training temperature — for K>1)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (default 1: off)")
    g.add_argument("--seed", type=int, default=0, help="seed of the first rollout; rollout i uses SEED+i")
    g.add_argument("--min-agreement", type=float, default=DEFAULT_MIN_AGREEMENT,
                   help=f"abstain when fewer of the answered rollouts back the majority (default {DEFAULT_MIN_AGREEMENT})")
    g.add_argument("--min-answered", type=float, default=DEFAULT_MIN_ANSWERED,
                   help=f"abstain when fewer of all rollouts answered (default {DEFAULT_MIN_ANSWERED})")
    g.add_argument("--top-logprobs", type=int,
                   help=f"alternatives recorded per token (default {DEFAULT_TOP_LOGPROBS} for K>1, else 0)")


AUTO = "auto"


def rollouts_arg(text: str) -> int | str:
    """``--rollouts``: a whole number K, or ``auto``."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of rollouts or 'auto', got {text!r}") from None


def rollout_settings(args: argparse.Namespace) -> RolloutSettings:
    """The rollouts the options ask for (``--rollouts auto``: up to ``--max-rollouts``)."""
    if args.rollouts == AUTO:
        if args.max_rollouts < 1:
            raise Speco3Error(f"--max-rollouts must be at least 1, got {args.max_rollouts}")
        return RolloutSettings(args.max_rollouts, args.temperature, args.top_p, args.seed, args.min_agreement,
                               args.min_answered, auto=True)
    if args.rollouts < 1:
        raise Speco3Error(f"--rollouts must be at least 1, got {args.rollouts}")
    return RolloutSettings(args.rollouts, args.temperature, args.top_p, args.seed, args.min_agreement,
                           args.min_answered)


def lora_adapters(args: argparse.Namespace, task: Task | None = None) -> tuple[LoraAdapter, ...]:
    """The adapters of a run (`speco3.agent.tasks.run_adapters`): ``--lora``'s; without one, the task's own (its
    file's ``lora``); ``--lora none``: none, the base model; refused with ``--server``."""
    return run_adapters(args.lora, task, server=bool(args.server))


def engine_settings(args: argparse.Namespace, task: Task | None = None) -> EngineSettings:
    """The engine's part of `run_settings` (no rollout options needed: ``server check`` and the like); ``task``:
    the task whose adapter runs when no ``--lora`` is given (`lora_adapters`)."""
    settings = EngineSettings(n_threads=args.threads, n_gpu_layers=args.n_gpu_layers,
                              image_max_tokens=args.image_max_tokens, kv_type=args.kv_type, use_mmap=args.use_mmap)
    if args.n_ctx is not None:
        settings.n_ctx = args.n_ctx
    if args.parallel is not None:
        settings.n_seq = max(1, args.parallel)
    slots = vars(args).get("slots")
    if slots is not None and slots > settings.n_seq:
        settings.n_seq = slots
    if args.max_tokens_per_turn:
        settings.max_tokens_per_turn = args.max_tokens_per_turn
    settings.lora = lora_adapters(args, task)
    return settings


def run_settings(args: argparse.Namespace, task: Task | None = None) -> RunSettings:
    """The one settings object of the options (`speco3.agent.settings.RunSettings`); bad values: `Speco3Error`.
    ``task``: the task run (its adapter applies when no ``--lora`` is given)."""
    rollouts = rollout_settings(args)
    try:
        settings = RunSettings.of(engine_settings(args, task), rollouts, args.top_logprobs)
        settings.plan()  # checks K and the temperature
        settings.thresholds()
    except ValueError as exc:
        raise Speco3Error(str(exc).replace("min_", "--min-").replace("top_logprobs", "--top-logprobs")) from exc
    return settings


def model_choice(args: argparse.Namespace) -> ModelChoice:
    """The model the options choose (`speco3.engine.choice`): a server, a script, explicit files, or an installed
    model (the store's default without ``--model``)."""
    if vars(args).get("demo"):
        given = [name for name, value in (("--model", args.model), ("--text", args.text), ("--mmproj", args.mmproj),
                                          ("--server", args.server), ("--scripted", args.scripted)) if value]
        if given:
            raise Speco3Error(f"--demo runs the scripted demo session, not a model: it takes no {', '.join(given)}")
        return DEMO
    if args.server:
        return ModelServer.of(server_config(args))
    if args.scripted:
        return Scripted(args.scripted)
    if bool(args.text) != bool(args.mmproj):
        raise Speco3Error("--text and --mmproj go together (the text GGUF and its vision projector)")
    return FilePair(args.text, args.mmproj) if args.text else InstalledModel(args.model)


def check_demo_run(settings: RunSettings) -> None:
    """``--demo`` runs one greedy session per spectrum: refuse the rollout options (`Speco3Error`)."""
    if settings.plan() is not None:
        raise Speco3Error("--demo runs one scripted session per spectrum (its script never varies): the rollout "
                          "options (--rollouts, --temperature, --top-p, --seed) do not apply")


def demo_cli_engine(file_name: str | None, task: Task) -> Engine:
    """``--demo``: the scripted demo session of the demo spectrum in file ``file_name`` for ``task``
    (`speco3.demo`), not loaded; any other spectrum is refused (`Speco3Error`, with the reason)."""
    if (why := demo_refusal(file_name)) is not None:
        raise Speco3Error(why)
    return demo_file_engine(file_name, task, delay_s=0.0)


def open_cli_engine(args: argparse.Namespace, settings: RunSettings, *, load: bool = True,
                    spectrum: Spectrum | None = None, task: Task | None = None) -> Engine:
    """The engine the options ask for (`model_choice`); ``load=False`` opens it without loading the model yet (its
    `ModelInfo` is known: `load_cli_engine` loads it later). A server's engine is loaded and announced at once.
    ``--demo``: the scripted demo session of ``spectrum`` and ``task`` (`demo_cli_engine`)."""
    choice = model_choice(args)
    if choice is DEMO:
        if spectrum is None or task is None:
            raise Speco3Error("--demo runs the scripted demo session of one spectrum and task at a time")
        check_demo_run(settings)
        engine = demo_cli_engine(spectrum.meta.file_name, task)
        if load:
            engine.load()
        return engine
    if isinstance(choice, ModelServer):
        return open_server_engines(args, settings.engine, 1)[0]
    engine = choice.open(settings.engine, threaded=not choice.scripted)
    if load:
        load_cli_engine(engine, args)
    return engine


def load_cli_engine(engine: Engine, args: argparse.Namespace) -> None:
    """Load an engine `open_cli_engine` opened with ``load=False``, saying so on stderr; closed if it fails."""
    if args.scripted or vars(args).get("demo"):
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


def fill_model_digests(info: ModelInfo) -> None:
    """Put the sha256 of explicitly given model files into ``info`` (cached by path, size and mtime)."""
    from speco3.config import cache_dir

    cache_path = cache_dir() / "model-sha256.json"
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    changed = False
    for attr, path in (("text_sha256", info.text_path), ("mmproj_sha256", info.mmproj_path)):
        if getattr(info, attr) or not path:
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


def default_render() -> Callable[[View], RenderedImage]:
    """The training-faithful renderer (``speco3.render``) as a `speco3.agent.tool.RenderFn` (``View -> RenderedImage``)."""
    try:
        from speco3.render import render_view  # Qt: imported only by the commands that render
    except ImportError as exc:
        raise Speco3Error(f"the spectrum renderer is not available ({exc})") from exc
    return render_view  # the pixels go to the model's image directly; no PNG is encoded for it


def renderer(args: argparse.Namespace) -> RenderFn:
    """The renderer `speco3.cli.main` was given (``args.render``), else `default_render`."""
    render = vars(args).get("render")
    return render if render is not None else default_render()


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
