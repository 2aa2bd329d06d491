"""``spec-o3 models list|pull|import|verify|fit|remove|default|add-adapter|remove-adapter``, ``spec-o3 convert HF_DIR``
and ``spec-o3 convert-lora PEFT_DIR --base MODEL``.

Progress goes to stderr (a self-updating line on a terminal, one line per 10 % otherwise); results go to stdout.
Nothing here touches the network except ``models pull``, which the user asks for explicitly.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from speco3_models import catalog
from speco3_models.catalog import format_bytes

logger = logging.getLogger(__name__)


class StderrProgress:
    """``progress(label, done, total)`` printer for long steps (copy, hash, download, convert, quantize)."""

    def __init__(self, stream=None, min_interval: float = 0.2):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval = min_interval
        self._label: str | None = None
        self._last = 0.0
        self._decile = -1

    def __call__(self, label: str, done: int, total: int) -> None:
        now = time.monotonic()
        if label != self._label:
            self._finish_line()
            self._label, self._decile, self._last = label, -1, 0.0
        frac = done / total if total else None
        finished = total and done >= total
        if self.tty:
            if finished or now - self._last >= self.min_interval:
                self.stream.write(f"\r{self._text(label, done, total, frac)}\x1b[K")
                self.stream.flush()
                self._last = now
            return
        decile = int(frac * 10) if frac is not None else -1
        if decile > self._decile or (frac is None and now - self._last >= 5):
            self.stream.write(self._text(label, done, total, frac) + "\n")
            self.stream.flush()
            self._decile, self._last = decile, now

    @staticmethod
    def _text(label: str, done: int, total: int, frac: float | None) -> str:
        if frac is None:
            return f"{label}: {done}"
        if total > 10_000:
            return f"{label}: {frac:4.0%} ({format_bytes(done)} of {format_bytes(total)})"
        return f"{label}: {done}/{total}"

    def _finish_line(self) -> None:
        if self.tty and self._label is not None:
            self.stream.write("\n")

    def close(self) -> None:
        self._finish_line()
        self._label = None


def _store(args):
    from speco3_models.store import ModelStore

    return ModelStore(args.store)


def cmd_list(args) -> int:
    store = _store(args)
    installed = store.list()
    default = store.default()
    if args.json:
        out = {"store": str(store.root), "default": default.name if default else None,
               "catalog": [{"name": m.name, "repo_id": m.repo_id, "hidden_size": m.hidden_size,
                            "recommended": m.recommended, "license": m.license,
                            "installed": [i.name for i in installed if i.catalog_id == m.name]}
                           for m in catalog.catalog()],
               "installed": [i.to_dict() | {"size": i.size} for i in installed],
               "adapters": [a.to_dict() | {"base_installed": store.base_of(a) is not None} for a in store.adapters()]}
        print(json.dumps(out, indent=2))
        return 0
    print("Known models (sizes with ≈ are estimates):")
    for m in catalog.catalog():
        builds = [i.name for i in installed if i.catalog_id == m.name]
        size = m.installed_bytes()
        state = f"installed: {', '.join(builds)}" if builds else "not installed"
        print(f"  {m.name:12s} {m.repo_id:26s} {m.recommended_quant} {size} download {m.download_bytes} — {state}")
        print(f"  {'':12s} licence: base {m.license.get('base', '?')}; model: {m.license.get('model', '?')}")
    print(f"Installed models in {store.root}:")
    if not installed:
        print("  none — get one with 'spec-o3 models pull spec-o3-7b', 'spec-o3 models import TEXT.gguf "
              "MMPROJ.gguf' or 'spec-o3 convert HF_DIR'")
    for i in installed:
        mark = "*" if default and i.name == default.name else " "
        print(f" {mark}{i.name:24s} {i.quant:7s} {format_bytes(i.size):>10s}  hidden {i.hidden_size}  "
              f"{i.provenance.describe()}  ({i.created})")
    if installed:
        print("  (* = default)")
    _print_adapters(store)
    return 0


def _print_adapters(store) -> None:
    adapters = store.adapters()
    if not adapters:
        return
    print("LoRA adapters (each runs only on the base it was made for):")
    for a in adapters:
        base = store.base_of(a)
        state = f"for {base.name}" if base else f"for {a.base_name or '?'} (no longer installed)"
        ranks = "/".join(str(r) for r in a.ranks)
        print(f"  {a.name:24s} {state}  base sha256 {a.base_text_sha256[:12]}…  rank {ranks}, alpha {a.alpha:g}, "
              f"{a.n_matrices} matrices  {a.path}")


def cmd_add_adapter(args) -> int:
    a = _store(args).add_adapter(args.file, args.name, base=args.base, copy=not args.link)
    print(f"installed LoRA adapter {a.name} for {a.base_name} ({a.path})")
    return 0


def cmd_remove_adapter(args) -> int:
    a = _store(args).remove_adapter(args.name)
    print(f"removed LoRA adapter {a.name}")
    return 0


def cmd_convert_lora(args) -> int:
    from speco3_base.fileio import sha256_file
    from speco3_converters.lora import convert_lora

    store = _store(args)
    peft_dir = Path(args.peft_dir).expanduser()
    base = Path(args.base).expanduser()
    if base.suffix == ".gguf" and base.is_file():  # a text GGUF outside the store: hashed here
        text, digest = base, sha256_file(base, StderrProgress())
        model = next((m for m in store.list() if m.text.sha256 == digest), None)
        base_name = model.name if model else base.name
    else:
        model = store.get(args.base)
        text, digest, base_name = model.text_path, model.text.sha256, model.name
    name = args.name or peft_dir.resolve().name
    out = Path(args.out).expanduser() if args.out else peft_dir / f"{name}-{args.outtype.upper()}.gguf"
    res = convert_lora(peft_dir, text, out, base_sha256=digest, base_name=base_name, outtype=args.outtype, name=name,
                       dry_run=args.dry_run)
    ranks = "/".join(str(r) for r in res.ranks)
    what = f"{len(res.pairs)} matrices, rank {ranks}, alpha {res.alpha:g}, base {base_name} (sha256 {digest[:12]}…)"
    if args.dry_run:
        for p in res.pairs:
            print(f"  {p.module} -> {p.target}.lora_a/.lora_b  rank {p.rank}"
                  + (f"  (PEFT scaling folded: x{p.fold:.6g})" if p.fold != 1.0 else ""))
        print(f"would write {out}: {what}")
        return 0
    print(f"adapter: {out} ({what})")
    if args.no_register:
        return 0
    if model is None:
        print(f"not installed in the model store: its base {base_name} is not an installed model")
        return 0
    a = store.add_adapter(out, name, base=model.name, copy=False)
    print(f"installed LoRA adapter {a.name} for {model.name}; use it with --lora {a.path}")
    return 0


def cmd_pull(args) -> int:
    from speco3_converters.build import (
        build_model,  # the converter runs when the repository holds safetensors
    )
    from speco3_models.pull import pull

    store = _store(args)
    entry = catalog.find(args.name)
    if entry is not None:
        size = entry.installed_bytes(args.quant)
        print(f"Pulling {entry.repo_id}: download {entry.download_bytes}, installed size {size}", file=sys.stderr)
    progress = StderrProgress()
    try:
        model = pull(store, args.name, args.quant, convert=build_model, revision=args.revision, progress=progress,
                     keep_checkpoint=args.keep_checkpoint, install_name=args.install_name, make_default=args.default)
    finally:
        progress.close()
    print(f"installed {model.name} ({model.quant}, {format_bytes(model.size)})")
    return 0


def cmd_import(args) -> int:
    store = _store(args)
    progress = StderrProgress()
    try:
        model = store.import_pair(args.text, args.mmproj, args.name, copy=not (args.link or args.move),
                                  move=args.move, progress=progress, make_default=args.default)
    finally:
        progress.close()
    print(f"installed {model.name} ({model.quant}, hidden size {model.hidden_size}, {format_bytes(model.size)})")
    return 0


def cmd_verify(args) -> int:
    store = _store(args)
    names = [args.name] if args.name else [m.name for m in store.list()]
    if not names:
        print("no model installed")
        return 0
    failed = 0
    progress = StderrProgress()
    for name in names:
        report = store.verify(name, hashes=not args.quick, progress=progress)
        progress.close()
        ok = report.ok
        lines = report.lines()
        if ok and args.load:
            from speco3_models.probe import probe_load

            model = store.get(name)
            probe = probe_load(model.text_path, model.mmproj_path, timeout=args.timeout)
            ok = probe.ok
            lines.append(f"  load: {'ok' if probe.ok else probe.error} ({probe.seconds:.1f} s)")
            if not probe.ok:
                lines[0] = f"{name}: FAILED"
        print("\n".join(lines))
        failed += not ok
    return 1 if failed else 0


def cmd_remove(args) -> int:
    store = _store(args)
    model = store.get(args.name)
    if not args.yes:
        if not sys.stdin.isatty():
            print(f"refusing to remove {model.name} without confirmation: pass --yes", file=sys.stderr)
            return 1
        answer = input(f"Remove {model.name} ({format_bytes(model.size)})? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("kept")
            return 1
    store.remove(model.name)
    print(f"removed {model.name}")
    return 0


def cmd_default(args) -> int:
    store = _store(args)
    if args.name:
        store.set_default(args.name)
    model = store.default()
    if model is None:
        print("no model installed")
        return 1
    chosen = store.default_name() == model.name
    print(f"{model.name}{'' if chosen else ' (best installed; no default chosen)'}")
    return 0


def cmd_convert(args) -> int:
    from speco3_converters.build import build_model

    store = None if args.no_register else _store(args)
    progress = StderrProgress()
    try:
        result = build_model(store, args.hf_dir, quant=args.quant, outtype=args.outtype,
                             mmproj_type=args.mmproj_type, out_dir=args.out,
                             name=args.name, register=not args.no_register, keep_intermediate=args.keep_intermediate,
                             dry_run=args.dry_run, progress=progress, make_default=args.default)
    finally:
        progress.close()
    if args.dry_run:
        plan = result.plan
        print(json.dumps(plan.describe(), indent=2, default=str) if hasattr(plan, "describe") else plan)
        return 0
    if result.model is not None:
        print(f"installed {result.model.name} ({result.model.quant}, {format_bytes(result.model.size)})")
    print(f"text:   {result.text_path}\nmmproj: {result.mmproj_path}")
    return 0


def cmd_fit(args) -> int:
    from dataclasses import asdict, replace

    from speco3.engine.base import EngineSettings
    from speco3.engine.fitting import plan_model
    from speco3_models.fit import format_gib
    from speco3_models.fit_tool import find_fit_params

    settings = EngineSettings()
    entry = catalog.find(args.name) if args.name else None
    ctx = args.ctx or (entry.recommended_ctx if entry else settings.n_ctx)
    settings = replace(settings, n_ctx=int(ctx), kv_type=args.kv_type, flash_attn=not args.no_flash_attn,
                       use_mmap=args.use_mmap)
    plan, devices = plan_model(args.name, args.text, args.mmproj, settings=settings,
                               store=_store(args) if args.store else None, use_tool=not args.no_tool, quant=args.quant)
    if args.json:
        tool = find_fit_params()
        out = plan.to_dict() | {"devices_seen": [asdict(d) for d in devices],
                                "fit_tool": str(tool) if tool and not args.no_tool else None}
        print(json.dumps(out, indent=2))
        return 0 if plan.fits else 1
    est = plan.estimate
    print(f"estimate at a {est.n_ctx}-token context, {est.kv_type} KV cache ({plan.source}):")
    for key, value in est.parts().items():
        print(f"  {key.removesuffix('_bytes').replace('_', ' '):16s} {format_gib(value):>10s}")
    host = "unknown" if plan.host_free_bytes is None else format_gib(plan.host_free_bytes)
    print(f"free memory: RAM {host}" + "".join(f"; {d.name} {format_gib(d.free_bytes)} of {format_gib(d.total_bytes)}"
                                           for d in plan.devices))
    print(plan.summary())
    if plan.fits:
        how = ("mapped (the fastest load; during it the file's pages, which the system can drop, add up to "
               f"{format_gib(plan.mapped_bytes)} to the peak)" if plan.use_mmap
               else "read into memory (a slower load, a lower peak)")
        if args.use_mmap is not None:
            why = "as asked (--mmap)" if args.use_mmap else "as asked (--no-mmap)"
        elif plan.host_free_bytes is None:
            why = "free memory unknown"
        else:
            why = (f"{format_gib(plan.host_needed_bytes + plan.mapped_bytes)} with the mapped file, "
                   f"{format_gib(plan.host_free_bytes)} free")
        print(f"model file: {how}: {why}")
    for note in plan.notes:
        print(f"  note: {note}")
    return 0 if plan.fits else 1


def register(subparsers) -> None:
    """Add ``models`` and ``convert`` to the ``spec-o3`` command line."""
    p = subparsers.add_parser("models", help="list, download, import, verify and remove models")
    p.add_argument("--store", help="model store folder (default: the user data folder)")
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    s = sub.add_parser("list", help="known and installed models")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("pull", help="download a model from the Hugging Face Hub (needs a network)")
    s.add_argument("name", help="catalog name (spec-o3-7b, spec-o3-3b) or a Hugging Face repo id")
    s.add_argument("--quant", default=None, help="text model quantization (default: the recommended Q4_K_M)")
    s.add_argument("--revision", help="repository revision (branch, tag or commit)")
    s.add_argument("--name", dest="install_name", help="store name (default: e.g. spec-o3-7b-q4_k_m)")
    s.add_argument("--keep-checkpoint", action="store_true", help="keep the downloaded safetensors after conversion")
    s.add_argument("--default", action="store_true", help="make it the default model")
    s.set_defaults(func=cmd_pull)

    s = sub.add_parser("import", help="install a GGUF text model and its vision projector")
    s.add_argument("text", help="text model GGUF (arch qwen2vl)")
    s.add_argument("mmproj", help="vision projector GGUF (arch clip, qwen2.5vl_merger)")
    s.add_argument("--name", help="store name (default from the file name)")
    how = s.add_mutually_exclusive_group()
    how.add_argument("--link", action="store_true", help="hard-link (or reference in place) instead of copying")
    how.add_argument("--move", action="store_true", help="move the files into the store")
    s.add_argument("--default", action="store_true", help="make it the default model")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("verify", help="check installed files (presence, size, sha256, headers)")
    s.add_argument("name", nargs="?", help="model (default: all)")
    s.add_argument("--quick", action="store_true", help="skip the sha256 check")
    s.add_argument("--load", action="store_true", help="also load the pair with llama.cpp in a subprocess")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for --load")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("fit", help="estimate the memory a model needs and how it would load on this machine")
    s.add_argument("name", nargs="?", help="installed or catalog model (default: the default model)")
    s.add_argument("--text", help="text model GGUF (with --mmproj instead of a name)")
    s.add_argument("--mmproj", help="vision projector GGUF")
    s.add_argument("--ctx", type=int, help="context size (default: the model's recommended one)")
    s.add_argument("--quant", help="catalog model not installed: the quantization to plan for (default Q4_K_M)")
    s.add_argument("--kv-type", default="f16", choices=("f16", "f32", "q8_0"), help="KV cache type")
    s.add_argument("--no-flash-attn", action="store_true", help="plan without flash attention")
    s.add_argument("--mmap", dest="use_mmap", action=argparse.BooleanOptionalAction, default=None,
                   help="plan a mapped (--mmap) or read (--no-mmap) model file (default: what fits)")
    s.add_argument("--no-tool", action="store_true", help="do not run llama-fit-params (built-in estimate only)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_fit)

    s = sub.add_parser("remove", help="delete an installed model")
    s.add_argument("name")
    s.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    s.set_defaults(func=cmd_remove)

    s = sub.add_parser("default", help="show or choose the default model")
    s.add_argument("name", nargs="?")
    s.set_defaults(func=cmd_default)

    s = sub.add_parser("add-adapter", help="install a LoRA adapter GGUF (checked against the base it was made for)")
    s.add_argument("file", help="adapter GGUF written by spec-o3 convert-lora")
    s.add_argument("--base", help="installed model it is for (default: the one whose digest the adapter records)")
    s.add_argument("--name", help="store name (default from the file name)")
    s.add_argument("--link", action="store_true", help="hard-link (or reference in place) instead of copying")
    s.set_defaults(func=cmd_add_adapter)

    s = sub.add_parser("remove-adapter", help="delete an installed LoRA adapter")
    s.add_argument("name")
    s.set_defaults(func=cmd_remove_adapter)

    c = subparsers.add_parser("convert-lora", help="convert a PEFT LoRA adapter to a GGUF adapter for an installed "
                              "model (no torch needed)")
    c.add_argument("peft_dir", help="PEFT folder (adapter_config.json, adapter_model.safetensors)")
    c.add_argument("--base", required=True, metavar="MODEL",
                   help="installed model (or text GGUF) the adapter was trained for; its digest is recorded")
    c.add_argument("--out", metavar="FILE", help="adapter GGUF to write (default: PEFT_DIR/NAME-F32.gguf)")
    c.add_argument("--outtype", default="f32", choices=("f32", "f16", "bf16"), help="type of the LoRA factors (f32)")
    c.add_argument("--name", help="adapter name (default: the PEFT folder name)")
    c.add_argument("--no-register", action="store_true", help="only write the file; do not install it in the store")
    c.add_argument("--dry-run", action="store_true", help="check and list the mapping; write nothing")
    c.add_argument("--store", help="model store folder (default: the user data folder)")
    c.set_defaults(func=cmd_convert_lora)

    c = subparsers.add_parser("convert", help="convert a Hugging Face Qwen2.5-VL checkpoint to GGUF and install it")
    c.add_argument("hf_dir", help="checkpoint folder (config.json, tokenizer.json, *.safetensors, ...)")
    c.add_argument("--quant", default="Q4_K_M", help="text model quantization (Q4_K_M, Q5_K_M, Q6_K, Q8_0, F16, BF16, F32)")
    c.add_argument("--outtype", default="bf16", choices=("bf16", "f16", "f32"), help="intermediate text GGUF type")
    c.add_argument("--mmproj-type", default="f16", choices=("f16", "q8_0", "f32"), help="vision projector type")
    c.add_argument("--out", help="write the GGUF files here (default: into the model store)")
    c.add_argument("--name", help="store name (default: folder name + quant)")
    c.add_argument("--no-register", action="store_true", help="do not install in the model store (files go to --out, default HF_DIR/gguf)")
    c.add_argument("--dry-run", action="store_true", help="only list the planned tensors and keys")
    c.add_argument("--keep-intermediate", action="store_true", help="keep the unquantized text GGUF")
    c.add_argument("--default", action="store_true", help="make it the default model")
    c.add_argument("--store", help="model store folder (default: the user data folder)")
    c.set_defaults(func=cmd_convert)
