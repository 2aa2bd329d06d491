"""The engine interface shared by the real llama.cpp engine and the scripted test engine.

A conversation is a sequence of *parts*: text (with the chat markup written by the agent) and prepared images
(`speco3.imaging.PreparedImage`). The engine never sees the image placeholder text: an image part stands for the
whole ``<|vision_start|><|image_pad|><|vision_end|>`` span (mtmd adds the vision tokens itself).

`generate` evaluates whatever was appended since the last call, samples until ``<|im_end|>`` (or a budget /
cancel), commits every sampled token verbatim *including* the final ``<|im_end|>`` into the conversation, and returns
the text without the stop token.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from speco3.errors import EngineError
from speco3.imaging import PreparedImage
from speco3_base.defaults import DEFAULT_N_CTX  # noqa: F401 - re-exported: speco3.engine.base.DEFAULT_N_CTX

#: The KV cache's element type (llama.cpp's ggml types; `speco3.engine.context.KV_TYPES`).
KvType = Literal["f16", "f32", "q8_0"]

Part = str | PreparedImage
StopReason = Literal["stop", "length", "cancelled", "context_full"]
TokenCallback = Callable[[str], None]

@dataclass(frozen=True)
class Message:
    """One chat message in structured form: a role (``system``, ``user``, ``tool``), its content parts in order,
    and for a system message the tool schemas it declares. `speco3.agent.protocol` builds the conversation as
    messages; a local engine is fed their chat markup (``protocol.markup``), a chat server (an engine with
    `Engine.takes_messages`) the messages themselves, which its chat template writes."""

    role: Literal["system", "user", "tool"]
    content: tuple[Part, ...]
    tools: tuple[dict, ...] = ()

@dataclass(frozen=True)
class LoraAdapter:
    """A LoRA adapter GGUF applied on top of the text model (`spec-o3 convert-lora`), with its scale (1: as trained).

    The scale multiplies the adapter's own ``alpha / r`` (llama.cpp's ``llama_set_adapters_lora``)."""

    path: str
    scale: float = 1.0

    @classmethod
    def parse(cls, spec: str) -> LoraAdapter:
        """``FILE`` or ``FILE:SCALE`` (the command line's ``--lora``); a ``:`` not followed by a number is part of
        the path."""
        head, sep, tail = spec.rpartition(":")
        if sep and head:
            try:
                return cls(head, float(tail))
            except ValueError:
                pass
        return cls(spec)


@dataclass
class EngineSettings:
    """User-facing engine settings (persisted by the GUI, recorded with every verdict)."""

    n_ctx: int = DEFAULT_N_CTX
    n_threads: int | None = None  # None: physical cores
    n_gpu_layers: int | None = None  # None: all layers when llama.cpp supports GPU offload, else 0
    flash_attn: bool = True
    mmproj_on_gpu: bool = True
    image_max_tokens: int | None = None  # cap on image tokens per image (None: speco3.imaging.DEFAULT_MAX_TOKENS)
    seed: int = 0
    temperature: float = 0.0  # 0: greedy, as in the paper's evaluation
    top_p: float = 1.0
    top_k: int = 0
    max_tokens_per_turn: int = 2048
    kv_type: KvType = "f16"
    use_mmap: bool | None = None  # None: map the model file when it fits beside the weights (speco3_models.fit.choose_mmap)
    top_logprobs: int = 0  # > 0: record each generated token's log-probability and this many alternatives
    n_seq: int = 4  # sequences decoded together (rollouts of a spectrum, batch slots); 1: one at a time
    image_cache_mib: int = 32  # vision-encoder outputs kept by image digest for repeated windows; 0: off
    lora: tuple[LoraAdapter, ...] = ()  # adapters applied to the text model, each checked against its base

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Sampling:
    """How one conversation samples: greedy at temperature 0 (the paper's evaluation), else top-k → top-p →
    temperature → a draw seeded with ``seed``. Each rollout of a spectrum has its own (recorded with its trace)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0

    @classmethod
    def from_settings(cls, settings: EngineSettings) -> Sampling:
        return cls(settings.temperature, settings.top_p, settings.top_k, settings.seed)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token: its text, its log-probability under the model (log-softmax of the raw logits, before
    temperature and truncation), and the most probable alternatives at that position, best first."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass
class ModelInfo:
    """What model an engine runs (recorded with every verdict)."""

    model_id: str = "unknown"
    quant: str | None = None
    text_sha256: str | None = None
    mmproj_sha256: str | None = None
    text_path: str | None = None
    mmproj_path: str | None = None
    server: str | None = None  # the chat server's base URL when the model runs remotely (speco3.engine.remote)


@dataclass
class GenerationResult:
    text: str
    n_tokens: int
    stop_reason: StopReason
    seconds: float
    prompt_tokens: int = 0  # text tokens evaluated for this turn
    image_tokens: int = 0  # image tokens encoded for this turn
    images_encoded: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per generated token, when the engine records them

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class EngineStats:
    backend: str = "CPU"
    n_ctx: int = 0
    kv_cells_used: int = 0
    text_tokens_evaluated: int = 0
    images_encoded: int = 0  # images evaluated into the KV cache; extra["image_cache_hits"] of them skipped the encoder
    image_tokens_encoded: int = 0
    tokens_generated: int = 0
    decode_tokens_per_s: float = 0.0
    prefill_tokens_per_s: float = 0.0
    load_seconds: float = 0.0
    extra: dict = field(default_factory=dict)


class Engine(ABC):
    """Abstract inference engine. One conversation at a time; not thread-safe: one worker thread drives it."""

    settings: EngineSettings
    info: ModelInfo
    #: True for an engine fed structured `Message` lists (`extend_messages`) instead of chat-markup parts.
    takes_messages: bool = False

    @abstractmethod
    def load(self) -> None:
        """Load model files (idempotent). Raises `speco3.errors.ModelFileError` or `EngineError`."""

    @abstractmethod
    def reset(self, *, sampling: Sampling | None = None) -> None:
        """Start a new conversation (an engine may keep a cached common prefix in its KV cache) that samples with
        ``sampling`` (None: from `settings`)."""

    @abstractmethod
    def extend(self, parts: Sequence[Part]) -> None:
        """Append text and image parts to the conversation (evaluated lazily or eagerly)."""

    def extend_messages(self, messages: Sequence[Message]) -> None:
        """Append structured messages (engines with `takes_messages`; the others are fed their markup)."""
        raise NotImplementedError(f"{type(self).__name__} takes chat-markup parts (extend), not messages")

    @abstractmethod
    def generate(
        self,
        *,
        max_tokens: int | None = None,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationResult:
        """Evaluate the pending parts, then sample one assistant message (see module doc)."""

    @abstractmethod
    def stats(self) -> EngineStats:
        """Counters since load."""

    def recorded_settings(self) -> dict:
        """The engine settings recorded with every verdict: `EngineSettings.to_dict`, plus what ran where the engine
        knows it once loaded (``ran``: the backend and thread count of llama.cpp, whose sums — and so, for the same
        seeds, the sampled answers — differ with both; a server's own context and slots)."""
        return self.settings.to_dict()

    def parallel_sequences(self) -> int:
        """How many conversations `open_pool` can run at once (1: one at a time, through `SerialSlots`)."""
        return 1

    def open_pool(self) -> Slots:
        """Slots on parallel sequences of the loaded engine (only when `parallel_sequences` > 1)."""
        raise EngineError(f"{type(self).__name__} runs one conversation at a time")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Free native resources."""

    def __enter__(self) -> Engine:
        self.load()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: What `Slots.step` returns for each slot whose turn ended: the slot and its result, or the engine error (one of
#: `speco3.errors.OUTCOME_ERRORS`) that ended it.
StepResult = tuple[int, GenerationResult | Exception]


class Slots(ABC):
    """The slot protocol: several conversations generated together (see docs/architecture.md, "Engine: the slot
    protocol").

    A *slot* is one conversation: `open` it with its sampling, `extend` it with parts (or the messages they are the
    markup of), `begin` a generation, and call `step` until the slot's `StepResult` comes back (a step returns as
    soon as some turn ended); `release` it when the conversation ends, `close` the slots after use. Implemented by
    `speco3.engine.parallel.SerialSlots` (one slot on any `Engine`: llama.cpp, a chat server, the scripted engine),
    `speco3.engine.parallel.SequencePool` (llama.cpp sequences) and `speco3.engine.worker.WorkerSlots` (either,
    called on an `EngineWorker`'s thread).
    """

    #: How many slots may be open at once.
    capacity: int

    @abstractmethod
    def open(self, sampling: Sampling | None) -> int:
        """A new slot sampled with ``sampling`` (None: the engine's settings); returns its number."""

    @abstractmethod
    def extend(self, slot: int, parts: Sequence[Part], messages: Sequence[Message] | None = None) -> None:
        """Append ``parts`` to the slot's conversation (a chat server is fed ``messages`` instead, when given)."""

    @abstractmethod
    def begin(self, slot: int, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
              cancel: threading.Event | None = None) -> None:
        """Start one assistant message on the slot (it is generated by the next `step` calls)."""

    @abstractmethod
    def step(self, rounds: int | None = None) -> list[StepResult]:
        """Generate until some turn ended (or ``rounds`` decode rounds were done); the slots whose turn ended."""

    @abstractmethod
    def release(self, slot: int) -> None:
        """End the slot's conversation (a turn in progress is dropped)."""

    @abstractmethod
    def close(self) -> None:
        """Release every slot and give the engine back."""

    def __enter__(self) -> Slots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
