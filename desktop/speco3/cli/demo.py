"""``spec-o3 demo``: the embedded demo archive as a folder (`speco3.demo.write_demo_archive`), for trying the
commands without a model: ``spec-o3 vet "$(spec-o3 demo)" --task cv --out night.sqlite --demo``."""

from __future__ import annotations

import argparse
from pathlib import Path

from speco3.config import data_dir
from speco3.demo import write_demo_archive


def register(sub) -> None:
    p = sub.add_parser(
        "demo", help="write the demo archive (synthetic LAMOST spectra) and print its folder",
        description="Write the demo archive, about twenty synthetic LAMOST LRS spectra with recognizable features "
        "(written once; an up-to-date one is kept), and print its folder. Without a model, 'spec-o3 vet --demo' and "
        "'spec-o3 inspect --demo' run the scripted demo session on it, and the app opens it with its store "
        "(spec-o3-desktop --store STORE FOLDER). The app's File → Open demo archive writes the same archive in "
        "its data folder.")
    p.add_argument("folder", nargs="?", metavar="DIR",
                   help="where to write it (default: 'demo' in the data folder, as the app does)")
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    folder = Path(args.folder).expanduser() if args.folder else data_dir() / "demo"
    paths = write_demo_archive(folder)  # DemoError (a Speco3Error) when it cannot be written
    print(paths[0].parent.resolve())
    return 0


__all__ = ["cmd_demo", "register"]
