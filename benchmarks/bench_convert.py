"""Conversion benchmark: peak memory and throughput of the streaming converter on a ≥ 2 GB checkpoint.

Generates a random bf16 Qwen2.5-VL checkpoint of about 1.4 B parameters (Qwen2-1.5B-shaped text model:
hidden 1536, intermediate 8960, 16 layers, vocab 151936, untied; an 8-block vision tower of the real
width 1280/3420) in 1 GiB shards, written fast from random bytes. A shape with the real vocabulary size (1.5b,
7b) carries Qwen2.5-VL's real tokenizer (`speco3_testkit.qwenvocab`, a test dependency), so the GGUFs made from
it count prompt tokens as the real model does; ``--quick`` keeps the tiny trained one. It then converts it
(BF16 text + F16 projector) in a child process and reports

* the child's peak RSS (``getrusage(RUSAGE_CHILDREN).ru_maxrss``; goal ≤ 1.5 GiB, independent of model
  size — the same figure for the tiny test model is printed beside it) and its peak anonymous memory
  (``peak_anon_MiB``: ``RssAnon`` sampled every 20 ms; RSS also counts the mapped checkpoint's clean pages),
* conversion throughput in MB/s of checkpoint bytes against a plain copy (``shutil.copyfile``) of the same
  shards in the same run; both timings start and end with ``os.sync()`` so that the write-back of the
  output is counted alike.

``--quantize Q4_K_M`` then quantizes the converted text GGUF with llama.cpp's ``llama_model_quantize`` in a child
(``python -m speco3_converters.quantize``, as the model build does) once per slab size in ``--quant-buffers`` (MiB;
0 = llama.cpp's default of 8 GiB, which takes a whole tensor at once), sampling that child's RSS and ``RssAnon``
every 50 ms: ``quantize`` lists time, peak RSS and peak anonymous memory per slab size.

Everything is written under a temporary folder (``--dir``) and removed at the end.

Run: ``.venv/bin/python benchmarks/bench_convert.py [--layers 16] [--dir /tmp]``; prints JSON. ``--quick``: a
toy-sized checkpoint in 4 MiB shards (seconds, same code paths). ``--shape 7b`` (opt-in, real scale): a
Qwen2.5-VL-7B-shaped checkpoint (28 layers of hidden 3584, 32 vision blocks, about 8.3 B parameters, 16.6 GB of
bf16): it needs about 34 GB free under ``--dir`` (checkpoint + converted output, then checkpoint + copy) and
runs for several times the default's wall time (not measured here).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import math
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _kit  # noqa: F401 - puts the test kit on sys.path
import numpy as np

from speco3_converters.hfconfig import load_config
from speco3_converters.qwen25vl import expected_shapes
from speco3_testkit import qwenvocab
from speco3_testkit.tinymodel import VOCABS, make_tiny_qwen25vl, model_config, write_side_files

SHARD_BYTES = 1 << 30
CHUNK = 1 << 24  # elements per random chunk
#: Headline keys of the printed JSON (the manual's benchmark table lists them: docs/contributing/benchmarks.md).
JSON_KEYS = ("checkpoint_bytes", "convert_MBps", "plain_copy_MBps", "convert_vs_copy_throughput",
             "peak_rss_MiB", "peak_rss_ok")
#: (text dims, vision dims) of the generated checkpoint; ``layers`` of the text model is set by ``--layers``.
SHAPES = {
    "1.5b": ({"hidden": 1536, "intermediate": 8960, "heads": 12, "kv_heads": 2, "vocab": 151936, "mrope": [16, 24, 24]},
             {"depth": 8, "hidden": 1280, "intermediate": 3420, "heads": 16, "fullatt": [3, 7]}),
    "7b": ({"hidden": 3584, "intermediate": 18944, "heads": 28, "kv_heads": 4, "vocab": 152064, "mrope": [16, 24, 24]},
           {"depth": 32, "hidden": 1280, "intermediate": 3420, "heads": 16, "fullatt": [7, 15, 23, 31]}),
    "quick": ({"hidden": 256, "intermediate": 768, "heads": 4, "kv_heads": 2, "vocab": 2048, "mrope": [8, 12, 12]},
              {"depth": 4, "hidden": 128, "intermediate": 336, "heads": 4, "fullatt": [1, 3]}),
}


def _random_bf16(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random finite bf16 words of magnitude ~2^-8..2^-6 (sign, exponent 119-121, random mantissa)."""
    r = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    return (r & np.uint16(0x807F)) | np.uint16(0x3B80 + ((r[0] & 1) << 7))


def checkpoint_vocab(n_rows: int) -> str:
    """The tokenizer of a checkpoint with ``n_rows`` embedding rows: Qwen2.5-VL's real one when it fits."""
    return "qwen25" if n_rows >= qwenvocab.N_TOKENS else "tiny"


def write_checkpoint(folder: Path, layers: int, seed: int = 0, shape: str = "1.5b",
                     shard_bytes: int = SHARD_BYTES, text_overrides: dict | None = None) -> tuple[int, int]:
    """Write the random checkpoint; returns (bytes of tensor data, parameter count).

    ``text_overrides`` replaces text dimensions of ``shape`` (e.g. ``{"vocab": 152064}``: a reduced shape with
    the real vocabulary). The tokenizer follows the vocabulary size (`checkpoint_vocab`).
    """
    text_dims, vision_dims = SHAPES[shape]
    text_dims = {**text_dims, **(text_overrides or {}), "layers": layers}
    tok, added = VOCABS[checkpoint_vocab(text_dims["vocab"])][0]()
    cfg = model_config(added, text_dims=text_dims, vision_dims=vision_dims)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    write_side_files(folder, tok, added)
    shapes = expected_shapes(load_config(folder), tied=False)
    groups, cur, size = [], [], 0
    for name, shape in shapes.items():
        nbytes = math.prod(shape) * 2
        if cur and size + nbytes > shard_bytes:
            groups.append(cur)
            cur, size = [], 0
        cur.append((name, shape, nbytes))
        size += nbytes
    groups.append(cur)
    rng = np.random.default_rng(seed)
    weight_map, total, params = {}, 0, 0
    for k, group in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, nbytes in group:
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[name] = fname
        blob = json.dumps(header).encode()
        blob += b" " * (-len(blob) % 8)
        with open(folder / fname, "wb") as fh:
            fh.write(struct.pack("<Q", len(blob)) + blob)
            for _, shape, _ in group:
                n = math.prod(shape)
                for a in range(0, n, CHUNK):
                    fh.write(_random_bf16(rng, min(CHUNK, n - a)).tobytes())
                params += n
        total += off
        print(f"generated {fname} ({off / 2**30:.2f} GiB)", file=sys.stderr)
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    return total, params


_CONVERT = """
import os, resource, sys, json, threading, time
from speco3_converters import convert_checkpoint
from speco3_converters.verify import verify_pair

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key))

anon = [0]
def sample():  # RssAnon every 20 ms: RSS also counts the mapped checkpoint's clean pages, which the system can drop
    while True:
        anon[0] = max(anon[0], status("RssAnon"))
        time.sleep(0.02)

threading.Thread(target=sample, daemon=True).start()
t0 = time.perf_counter()
res = convert_checkpoint(sys.argv[1], sys.argv[2], outtype="bf16", mmproj_type="f16", name="bench")
os.sync()  # count the write-back of the output, as for the copy
t1 = time.perf_counter()
t, m = verify_pair(res.text_path, res.mmproj_path)
t2 = time.perf_counter()
print(json.dumps({"convert_s": t1 - t0, "verify_s": t2 - t1, "text_bytes": t["size"], "mmproj_bytes": m["size"],
                  "text_types": t["types"], "self_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "peak_anon_kib": max(anon[0], status("RssAnon"))}))
"""


def _safetensors_header(path: Path) -> dict:
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def convert_in_child(src: Path, out: Path) -> tuple[float, dict]:
    """Convert + verify in a child process; returns its wall time (with interpreter start) and its report."""
    os.sync()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CONVERT, str(src), str(out)], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"conversion failed:\n{proc.stderr[-2000:]}")
    return seconds, json.loads(proc.stdout.strip().splitlines()[-1])


def quantize_in_child(src: Path, dst: Path, qtype: str, buf_mib: int) -> dict:
    """Quantize ``src`` in a child as `speco3_converters.quantize` does; its wall time and sampled peak memory."""
    from speco3_converters.quantize import FTYPES

    cmd = [sys.executable, "-m", "speco3_converters.quantize", str(src), str(dst), str(FTYPES[qtype]), "0",
           str(buf_mib << 20)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = {"VmRSS": 0, "RssAnon": 0}
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    key = line.split(":")[0]
                    if key in peak:
                        peak[key] = max(peak[key], int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"quantization failed (exit {proc.returncode})")
    out = {"slab_MiB": buf_mib or "llama.cpp default (8 GiB)", "seconds": round(seconds, 1),
           "peak_rss_MiB": round(peak["VmRSS"] / 1024, 1), "peak_anon_MiB": round(peak["RssAnon"] / 1024, 1),
           "output_bytes": dst.stat().st_size}
    print(f"quantize {qtype} slab {buf_mib} MiB: {json.dumps(out)}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=16, help="text layers (16 → ~1.4 B parameters, 2.8 GB)")
    ap.add_argument("--dir", default=None, help="scratch folder (default: system temp)")
    ap.add_argument("--shape", choices=("1.5b", "7b"), default="1.5b",
                    help="7b: opt-in real-scale checkpoint (28 layers unless --layers; ~34 GB free disk needed)")
    ap.add_argument("--quick", action="store_true", help="toy-sized checkpoint in 4 MiB shards (seconds)")
    ap.add_argument("--src", help="convert this existing checkpoint folder instead of generating one (not removed; "
                    "e.g. a 7B-shaped checkpoint kept from an earlier run)")
    ap.add_argument("--quantize", default=None, help="also quantize the converted text GGUF to this type (Q4_K_M ...)")
    ap.add_argument("--quant-buffers", default="256,0",
                    help="llama.cpp slab sizes in MiB for --quantize (0: its default); the first is what we ship")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep the converted pair in DIR (the text GGUF quantized with the first slab size when "
                         "--quantize is given, else the bf16 one, and the F16 projector), e.g. for bench_parallel.py; "
                         "everything else is removed as usual")
    args = ap.parse_args(argv)
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    if args.quick:
        args.shape, args.layers = "quick", 2
    elif args.shape == "7b" and args.layers == 16:
        args.layers = 28
    work = Path(tempfile.mkdtemp(prefix="speco3-bench-convert-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        if args.src:
            src = Path(args.src)
            shards = sorted(src.glob("*.safetensors"))
            nbytes = sum(p.stat().st_size for p in shards)
            params = sum(math.prod(t["shape"]) for p in shards for k, t in _safetensors_header(p).items()
                         if k != "__metadata__")
            args.shape, args.layers = f"existing {src}", load_config(src).text.n_layers
        else:
            src = work / "hf"
            nbytes, params = write_checkpoint(src, args.layers, shape=args.shape,
                                              shard_bytes=4 << 20 if args.quick else SHARD_BYTES)
        gen_s = time.perf_counter() - t0
        child_s, conv = convert_in_child(src, work / "gguf")  # first child: RUSAGE_CHILDREN is its peak
        conv_s = conv["convert_s"]
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        quant = []
        if args.quantize:
            text_gguf = next(p for p in (work / "gguf").glob("*.gguf") if not p.name.startswith("mmproj"))
            for i, mib in enumerate(int(b) for b in args.quant_buffers.split(",")):
                dst = work / f"q{i}.gguf"
                quant.append(quantize_in_child(text_gguf, dst, args.quantize, mib))
                if i and not filecmp.cmp(dst, work / "q0.gguf", shallow=False):  # streamed, not read whole
                    raise SystemExit("the slab size changed the quantized file")
            quant = {"type": args.quantize, "runs": quant, "same_file_every_slab_size": True} if quant else None
            if keep is not None and quant:
                shutil.move(work / "q0.gguf", keep / f"bench-{args.quantize}.gguf")
            for p in work.glob("q*.gguf"):
                p.unlink()
        if keep is not None:
            for p in (work / "gguf").glob("*.gguf"):
                if p.name.startswith("mmproj") or not quant:
                    shutil.move(p, keep / p.name)
        shutil.rmtree(work / "gguf")
        os.sync()
        t0 = time.perf_counter()
        (work / "copy").mkdir()
        for shard in sorted(src.glob("*.safetensors")):
            shutil.copyfile(shard, work / "copy" / shard.name)
        os.sync()
        copy_s = time.perf_counter() - t0
        shutil.rmtree(work / "copy")
        tiny = make_tiny_qwen25vl(work / "tiny")
        _, tiny_conv = convert_in_child(tiny, work / "tiny-gguf")
        mb = nbytes / 1e6
        result = {
            "shape": f"{args.shape}, {args.layers} text layers",
            "checkpoint_bytes": nbytes,
            "parameters": params,
            "generate_s": round(gen_s, 2),
            "convert_s": round(conv_s, 2),
            "convert_MBps": round(mb / conv_s, 1),
            "verify_s": round(conv["verify_s"], 2),
            "child_wall_s": round(child_s, 2),
            "plain_copy_s": round(copy_s, 2),
            "plain_copy_MBps": round(mb / copy_s, 1),
            "convert_vs_copy_throughput": round((mb / conv_s) / (mb / copy_s), 3),
            "peak_rss_MiB": round(peak_kib / 1024, 1),
            "peak_anon_MiB": round(conv["peak_anon_kib"] / 1024, 1),
            "peak_rss_tiny_model_MiB": round(tiny_conv["self_maxrss_kib"] / 1024, 1),
            "peak_rss_goal_MiB": 1536,
            "peak_rss_ok": peak_kib / 1024 <= 1536,
            "output_bytes": conv["text_bytes"] + conv["mmproj_bytes"],
            "text_types": conv["text_types"],
            "quantize": quant or None,
            "note": "convert_s and plain_copy_s both start and end with os.sync() (output on disk); convert_s is "
                    "planning + writing both GGUFs; verify_s (speco3_models.gguf_check on both outputs) and child_wall_s "
                    "(interpreter start + convert + verify) are reported apart",
        }
        print(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
