"""``spec-o3 self-test``: the installation self-test from the command line (same checks as
``spec-o3-desktop --self-test``; see `speco3.selftest`)."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)


def cmd_self_test(args) -> int:
    """Run the self-test with the app's renderer (Qt offscreen) and return its exit status."""
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before the renderer creates a Qt application
    from speco3 import selftest
    from speco3.render import render_view

    return selftest.run_and_report(args, render=render_view)


def register(subparsers) -> None:
    """Add ``self-test`` to the ``spec-o3`` command line."""
    from speco3 import selftest

    p = subparsers.add_parser(
        "self-test",
        help="check this installation offline: data, readers, renderer, agent loop, models, llama.cpp backend",
    )
    selftest.add_arguments(p)
    p.set_defaults(func=cmd_self_test)
