"""``spec-o3 export-training STORE --out DIR``: SFT trajectories, a SpecVI-Bench parquet and a manifest from the
vetters' decisions (`speco3.evaluate.training`)."""

from __future__ import annotations

import argparse
import json
import sys

from speco3.cli.options import renderer
from speco3.evaluate.training import export_training


def register(sub) -> None:
    p = sub.add_parser(
        "export-training", help="export the decisions as training data (SFT trajectories, SpecVI-Bench parquet)",
        description="Write the human decisions of STORE as training data into the new folder DIR: sft.jsonl and "
        "images/ (one trajectory per YES/NO decision with evidence windows, in the ShareGPT format of the Spec-o3 "
        "cold-start data; dataset_info.json declares it to LLaMA-Factory), bench.parquet (every YES/NO decision, "
        "with or without evidence, in SpecVI-Bench format: spec-o3 evaluate and GRPO read it) and manifest.json "
        "(counts per task and label, what was left out and why, store and model digests, renderer and prompt "
        "versions). Each spectrum is read again from its file; a file that is missing or changed since it was "
        "vetted (another sha256) is left out with a line saying why. UNSURE decisions are never exported.")
    p.add_argument("store", metavar="STORE", help="vetting store (SQLite)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (new, or empty)")
    p.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks (default: every task with decisions)")
    p.add_argument("--only-agreed", action="store_true",
                   help="only spectra decided by at least two vetters whose latest decisions all say the same YES "
                   "or NO (default: each spectrum's latest decision, whoever made it)")
    p.add_argument("--image-max-tokens", type=int, metavar="N",
                   help="cap on image tokens per image, as in vet/inspect (default 1280, above the renderer's views)")
    p.set_defaults(func=cmd_export_training)


def cmd_export_training(args: argparse.Namespace) -> int:
    render = renderer(args)
    if vars(args).get("render") is None:
        from speco3.render import renderer_fingerprint  # Qt: only for the real renderer

        name = renderer_fingerprint()
    else:
        name = f"{getattr(render, '__module__', '?')}.{getattr(render, '__qualname__', type(render).__name__)}"
    result = export_training(args.store, args.out, render, tasks=args.tasks, only_agreed=args.only_agreed,
                             image_max_tokens=args.image_max_tokens, renderer=name,
                             on_skip=lambda line: print(f"left out: {line}", file=sys.stderr))
    for line in result.warnings:
        print(f"warning: {line}", file=sys.stderr)
    totals = result.manifest["totals"]
    print(json.dumps({"out": str(result.out), **totals,
                      "per_task": {t: {"parquet": c["parquet"], "trajectories": c["trajectories"]}
                                   for t, c in result.manifest["counts"].items()}}, ensure_ascii=False))
    return 0


__all__ = ["cmd_export_training", "register"]
