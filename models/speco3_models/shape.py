"""What a model's memory use depends on: `ModelShape`, read from a text GGUF and its projector (metadata and tensor
sizes with the bounded scan, `speco3_models.gguf_scan`, never the weights) or from the catalog before anything is
downloaded (`shape_from_catalog`). `speco3_models.fit` turns a shape into an estimate and a load plan."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gguf.constants import LlamaFileType

from speco3_models.gguf_scan import scan_gguf

#: Rough bits per weight of the text quantizations (to suggest a smaller one in a refusal).
QUANT_BITS = {"Q4_K_M": 4.85, "Q5_K_M": 5.7, "Q6_K": 6.6, "Q8_0": 8.5, "F16": 16.0, "BF16": 16.0, "F32": 32.0}


@dataclass(frozen=True)
class ModelShape:
    """The figures of a model that its memory use depends on."""

    name: str
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    n_ff: int
    n_ctx_train: int
    layer_bytes: tuple[int, ...]  # weights of each block
    output_bytes: int  # output.weight + output_norm: offloaded with the last "layer" (n_gpu_layers = n_layers + 1)
    embd_bytes: int  # token_embd: llama.cpp keeps the input layer on the CPU
    projector_bytes: int = 0
    vision_hidden: int = 1280
    vision_heads: int = 16
    vision_ff: int = 3420
    quant: str = ""

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def weights_bytes(self) -> int:
        return sum(self.layer_bytes) + self.output_bytes + self.embd_bytes

    @classmethod
    def from_gguf(cls, text_path: str | Path, mmproj_path: str | Path | None = None) -> ModelShape:
        """Read the shape from a text GGUF (and its projector): metadata and tensor sizes, never the weights."""
        scan = scan_gguf(text_path)
        md = scan.metadata
        arch = md.get("general.architecture", "qwen2vl")
        n_layers = int(md[f"{arch}.block_count"])
        layers = [0] * n_layers
        output = embd = 0
        vocab = 0
        for t in scan.tensors:
            if t.name.startswith("blk."):
                layers[int(t.name.split(".")[1])] += t.nbytes
            elif t.name == "token_embd.weight":
                embd += t.nbytes
                vocab = t.shape[-1]
            else:
                output += t.nbytes
        n_embd = int(md[f"{arch}.embedding_length"])
        proj, hidden, heads, ff = 0, 0, 16, 3420
        if mmproj_path is not None:
            ps = scan_gguf(mmproj_path)
            proj = sum(t.nbytes for t in ps.tensors)
            hidden = int(ps.metadata.get("clip.vision.embedding_length", 1280))
            heads = int(ps.metadata.get("clip.vision.attention.head_count", 16))
            ff = int(ps.metadata.get("clip.vision.feed_forward_length", 3420))
        return cls(
            name=Path(text_path).stem, n_layers=n_layers, n_embd=n_embd,
            n_head=int(md[f"{arch}.attention.head_count"]),
            n_head_kv=int(md.get(f"{arch}.attention.head_count_kv", md[f"{arch}.attention.head_count"])),
            n_vocab=int(vocab), n_ff=int(md.get(f"{arch}.feed_forward_length", 4 * n_embd)),
            n_ctx_train=int(md.get(f"{arch}.context_length", 32768)), layer_bytes=tuple(layers),
            output_bytes=output, embd_bytes=embd, projector_bytes=int(proj if mmproj_path else 0),
            vision_hidden=hidden, vision_heads=heads, vision_ff=ff, quant=_file_type(md.get("general.file_type")),
        )


def _file_type(value) -> str:
    """``general.file_type`` as a quant name (``Q4_K_M``, ``Q8_0``, ``F16``…); "" when unknown."""
    try:
        name = LlamaFileType(int(value)).name  # e.g. MOSTLY_Q4_K_M, ALL_F32
    except (TypeError, ValueError):
        return ""
    return name.split("_", 1)[1] if "_" in name else name


def shape_from_catalog(entry, quant: str | None = None, mmproj_quant: str | None = None) -> ModelShape:
    """The shape of a catalog model before download: dimensions from its ``shape`` entry, the bytes of the text
    GGUF spread over its tensors in proportion to their parameters (the catalog's sizes are estimates)."""
    quant = (quant or entry.recommended_quant).upper()
    mq = (mmproj_quant or entry.recommended.get("mmproj_quant", "F16")).upper()
    sh = entry.extra.get("shape")
    if not sh or quant not in entry.text_bytes:
        raise ValueError(f"the catalog has no shape or no {quant} size for {entry.name}")
    e, n, vocab = entry.hidden_size, entry.n_layers, int(sh["vocab"])
    kv = int(sh["kv_heads"]) * e // int(sh["heads"])
    layer_params = 2 * e * e + 2 * e * kv + 3 * e * int(sh["intermediate"])
    io_params = vocab * e * (1 if entry.tied_embeddings else 2)
    per_param = entry.text_bytes[quant].value / (n * layer_params + io_params)
    embd = int(vocab * e * per_param)
    vision = sh.get("vision", {})
    return ModelShape(
        name=entry.install_name(quant), n_layers=n, n_embd=e, n_head=int(sh["heads"]), n_head_kv=int(sh["kv_heads"]),
        n_vocab=vocab, n_ff=int(sh["intermediate"]), n_ctx_train=int(sh.get("context_length", 32768)),
        layer_bytes=(int(layer_params * per_param),) * n, output_bytes=0 if entry.tied_embeddings else embd,
        embd_bytes=embd, projector_bytes=int(entry.mmproj_bytes[mq].value) if mq in entry.mmproj_bytes else 0,
        vision_hidden=int(vision.get("hidden", 1280)), vision_heads=int(vision.get("heads", 16)),
        vision_ff=int(vision.get("intermediate", 3420)), quant=quant,
    )
