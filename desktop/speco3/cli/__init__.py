"""``spec-o3`` command line. Each area registers its sub-commands from its own module."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import shlex
import sys

from speco3 import __version__
from speco3.agent.tool import RenderFn
from speco3.applog import file_handler, log_path, setup_logging
from speco3.errors import Speco3Error

# Modules with a ``register(subparsers)`` function, in help order.
COMMAND_MODULES: list[str] = ["speco3.cli.spectra", "speco3.cli.models", "speco3.cli.inspect", "speco3.cli.vet",
                              "speco3.cli.decide", "speco3.cli.export", "speco3.cli.training", "speco3.cli.queue",
                              "speco3.cli.triage", "speco3.cli.evaluate", "speco3.cli.render", "speco3.cli.selftest",
                              "speco3.cli.samp", "speco3.cli.merge", "speco3.cli.store", "speco3.cli.server",
                              "speco3.cli.tasks", "speco3.cli.demo"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spec-o3",
        description="Inspect FITS spectra and vet candidates with the Spec-o3 model, offline.",
    )
    parser.add_argument("--version", action="version", version=f"spec-o3 {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None, *, render: RenderFn | None = None) -> int:
    """Run one command; ``render``: the renderer the model commands use (default: the training-faithful one,
    `speco3.cli.options.default_render`; tests pass a small Pillow one)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.render = render
    setup_logging("spec-o3", verbose=args.verbose, console_level=logging.WARNING)
    log = logging.getLogger("speco3.cli")
    # the whole command line (options included: --no-mmap, --shard…); keys come from the environment, never argv,
    # and the file's filter blanks anything that looks like one
    log.info("command: %s", shlex.join(sys.argv[1:] if argv is None else list(argv)))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except Speco3Error as exc:
        _to_log_file(log, "command failed")
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` & co.: stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception:
        _to_log_file(log, "uncaught exception")
        path = log_path()
        print(f"spec-o3: unexpected error; the traceback is in {path}", file=sys.stderr)
        raise


def _to_log_file(log: logging.Logger, what: str) -> None:
    """The current exception with its traceback, in the log file only (the console gets one line)."""
    handler = file_handler()
    if handler is not None:
        record = log.makeRecord(log.name, logging.ERROR, __file__, 0, "%s", (what,), sys.exc_info())
        if handler.filter(record):
            handler.handle(record)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
