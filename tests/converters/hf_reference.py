"""Reference forward pass with transformers' Qwen2_5_VLForConditionalGeneration (parity tests only).

transformers' Qwen2.5-VL processor needs torchvision, which does not import beside the local CPU torch
build, so ``pixel_values`` / ``image_grid_thw`` are computed here with the Qwen2-VL patchify rule.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def qwen2vl_pixel_values(png: Path, mean, std, patch: int = 14, merge: int = 2,
                         temporal: int = 2) -> tuple[np.ndarray, list[int]]:
    """Patchify an image whose sides are multiples of 28 like Qwen2VLImageProcessor (no resize needed)."""
    img = np.asarray(Image.open(png).convert("RGB"), dtype=np.float32) * np.float32(1 / 255)
    img = (img - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    chw = img.transpose(2, 0, 1)
    c, h, w = chw.shape
    assert h % (patch * merge) == 0 and w % (patch * merge) == 0, "sides must be multiples of 28"
    gh, gw = h // patch, w // patch
    frames = np.stack([chw] * temporal)
    x = frames.reshape(1, temporal, c, gh // merge, merge, patch, gw // merge, merge, patch)
    x = x.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return np.ascontiguousarray(x.reshape(gh * gw, c * temporal * patch * patch)), [1, gh, gw]


def hf_forward(hf_dir: Path, png: Path, layout: list[dict], image_token_id: int, mean, std,
               n_predict: int = 16) -> tuple[np.ndarray, list[int]]:
    """Last-prompt-token logits and greedy tokens of transformers on the prompt mtmd built."""
    import torch
    from transformers import Qwen2_5_VLForConditionalGeneration

    ids: list[int] = []
    for chunk in layout:
        ids += chunk["tokens"] if chunk["type"] == "text" else [image_token_id] * chunk["n_tokens"]
    pv, thw = qwen2vl_pixel_values(png, mean, std)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(hf_dir, dtype=torch.float32)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    input_ids = torch.tensor([ids])
    # transformers 5 needs the modality of every token to build the 3-D M-RoPE positions
    mm_types = (input_ids == image_token_id).to(torch.int32)
    kwargs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
              "mm_token_type_ids": mm_types, "pixel_values": torch.from_numpy(pv),
              "image_grid_thw": torch.tensor([thw])}
    with torch.no_grad():
        logits = model(**kwargs).logits[0, -1].float().numpy()
        out = model.generate(**kwargs, max_new_tokens=n_predict, do_sample=False)
    return logits, [int(t) for t in out[0, len(ids):]]
