"""Random PEFT LoRA adapters for the tiny Qwen2.5-VL (`speco3_testkit.tinymodel`), written without torch.

The folder looks like PEFT's ``save_pretrained`` output for ``Qwen2_5_VLForConditionalGeneration`` under
transformers 5: ``adapter_config.json`` and ``adapter_model.safetensors`` with tensors named
``base_model.model.model.language_model.layers.N.<module>.lora_A.weight`` (``[r, in]``) and ``.lora_B.weight``
(``[out, r]``). Both factors are random (a freshly initialised PEFT LoRA has B = 0, which would hide every
mapping bug).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from .tinymodel import TEXT, _encode, write_safetensors

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


def module_shape(module: str, text: dict | None = None) -> tuple[int, int]:
    """``(out, in)`` of a text-model projection of the tiny model."""
    t = text or TEXT
    h, hd = t["hidden"], t["hidden"] // t["heads"]
    return {"q_proj": (t["heads"] * hd, h), "k_proj": (t["kv_heads"] * hd, h), "v_proj": (t["kv_heads"] * hd, h),
            "o_proj": (h, t["heads"] * hd), "gate_proj": (t["intermediate"], h), "up_proj": (t["intermediate"], h),
            "down_proj": (h, t["intermediate"])}[module]


def make_random_lora(out_dir: str | Path, *, r: int = 8, alpha: float = 16.0, targets=ATTN + MLP,
                     layers: int = TEXT["layers"], seed: int = 0, scale: float = 0.5, dtype: str = "f32",
                     prefix: str = "base_model.model.model.language_model.layers", extra_tensors: dict | None = None,
                     **config) -> Path:
    """Write a random LoRA folder; ``config`` adds or overrides adapter_config.json keys (``rank_pattern``, ...).

    ``rank_pattern`` values are honoured in the tensor shapes (PEFT's pattern rule). ``extra_tensors``: more
    tensors (name -> float32 array) to write, e.g. a vision target or a DoRA magnitude vector.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    st_dtype = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype]
    rank_pattern = config.get("rank_pattern") or {}
    tensors = {}
    for i in range(layers):
        for mod in targets:
            group = "self_attn" if mod in ATTN else "mlp"
            key = f"{prefix}.{i}.{group}.{mod}"
            rank = next((v for k, v in rank_pattern.items() if _matches(k, key.removeprefix("base_model.model."))), r)
            n_out, n_in = module_shape(mod)
            a = rng.standard_normal((rank, n_in), dtype=np.float32) * (scale / np.sqrt(n_in))
            b = rng.standard_normal((n_out, rank), dtype=np.float32) * (scale / np.sqrt(rank))
            tensors[f"{key}.lora_A.weight"] = (st_dtype, a.shape, _encode(a, dtype))
            tensors[f"{key}.lora_B.weight"] = (st_dtype, b.shape, _encode(b, dtype))
    for name, arr in (extra_tensors or {}).items():
        tensors[name] = (st_dtype, arr.shape, _encode(arr, dtype))
    write_safetensors(out / "adapter_model.safetensors", tensors)
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "tiny-qwen25vl", "r": r,
           "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": list(targets), "bias": "none",
           "use_rslora": False, "use_dora": False, "lora_bias": False, "modules_to_save": None,
           "rank_pattern": {}, "alpha_pattern": {}, "fan_in_fan_out": False, "inference_mode": True}
    cfg.update(config)
    (out / "adapter_config.json").write_text(json.dumps(cfg, indent=2))
    return out


def _matches(pattern: str, key: str) -> bool:
    return re.match(rf"(.*\.)?({pattern})$", key) is not None


def _main(argv: list[str] | None = None) -> int:
    """``python -m speco3_testkit.tinylora DIR``: write a random PEFT LoRA folder for the tiny checkpoint of
    ``speco3_testkit.tinymodel`` (its effect is noise: it tries the adapter path — convert-lora, a task's "lora",
    the app's model box — without a trained adapter)."""
    parser = argparse.ArgumentParser(prog="python -m speco3_testkit.tinylora", description=_main.__doc__)
    parser.add_argument("out", help="PEFT folder to write")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(make_random_lora(args.out, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
