"""Command line: ``python -m speco3_converters HF_DIR --out DIR [--outtype bf16] [--quant Q4_K_M] [--dry-run]``.

The application's ``spec-o3 convert`` (model store) wraps the same API and also registers the result;
this entry point is for direct use and scripting.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from speco3_base.errors import Speco3Error

from .convert import convert_checkpoint

logger = logging.getLogger(__name__)


class _Progress:
    """One status line per stage on stderr, throttled."""

    def __init__(self, stream=None):
        self.stream, self.last, self.stage = stream, 0.0, None

    def __call__(self, label: str, done: int, total: int) -> None:
        stage = label
        now = time.monotonic()
        if stage == self.stage and done < total and now - self.last < 0.5:
            return
        self.stage, self.last = stage, now
        pct = 100.0 * done / total if total else 100.0
        unit = f"{done / 2**20:.0f}/{total / 2**20:.0f} MiB" if stage in ("text", "mmproj") else f"{done}/{total}"
        end = "\n" if done >= total else "\r"
        stream = self.stream or sys.stderr
        stream.write(f"{stage:>9}: {pct:5.1f} % ({unit})\x1b[K{end}")
        stream.flush()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m speco3_converters",
                                description="Convert a Qwen2.5-VL / Spec-o3 checkpoint to GGUF (text model + "
                                            "vision projector), optionally quantize, and verify.")
    p.add_argument("hf_dir", help="Hugging Face checkpoint folder (safetensors, config.json, tokenizer.json)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--outtype", choices=("bf16", "f16", "f32"), default="bf16", help="text model type (bf16)")
    p.add_argument("--mmproj-type", choices=("f16", "f32", "q8_0"), default="f16", help="projector type (f16)")
    p.add_argument("--quant", choices=("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0"),
                   help="also quantize the text model with llama.cpp (keeps the converted file)")
    p.add_argument("--name", help="model name (default: the folder name)")
    p.add_argument("--dry-run", action="store_true", help="print the planned tensors and keys as JSON, write nothing")
    p.add_argument("-v", "--verbose", action="store_true", help="log details")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    progress = None if args.dry_run else _Progress()
    try:
        res = convert_checkpoint(args.hf_dir, args.out, outtype=args.outtype, mmproj_type=args.mmproj_type,
                                 name=args.name, progress=progress, dry_run=args.dry_run)
        if args.dry_run:
            print(json.dumps(res.plan.describe(), indent=1, default=str))
            return 0
        from .verify import verify_pair

        text, mmproj = res.files()
        if args.quant:
            from .quantize import quantize

            text = quantize(text, text.with_name(f"{text.stem.rsplit('-', 1)[0]}-{args.quant}.gguf"), args.quant,
                            progress=progress)
        t, m = verify_pair(text, mmproj)
        for note in res.plan.notes:
            print(f"note: {note}")
        print(f"text model: {text} ({t['size'] / 2**20:.1f} MiB, {t['n_tensors']} tensors, types {t['types']})")
        print(f"projector:  {mmproj} ({m['size'] / 2**20:.1f} MiB, {m['n_tensors']} tensors)")
    except Speco3Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
