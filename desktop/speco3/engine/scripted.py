"""`ScriptedEngine`: replays given assistant outputs through the `Engine` interface (tests, GUI demos, robustness).

Outputs come token piece by token piece through ``on_token``, exactly like a real engine streams; cancel is honoured
between pieces and ``max_tokens`` counts pieces. The engine records every part it was given plus what it "generated"
(with the ``<|im_end|>`` a real engine would sample), so tests can assert on the conversation. No randomness.

Scripts
-------
``outputs`` is a list of strings (turn 1, turn 2, …; replayed from the start after every ``reset``), or a callable
``(conversation parts) -> str``. A list item that is an exception instance is raised instead (engine failures).
`load_script` reads the python-free JSON form used by ``spec-o3 vet --scripted FILE``:

- ``["<think>…</think><tool_call>…</tool_call>", "<answer>\\boxed{YES}</answer>"]``, or
- ``{"outputs": [...], "delay_s": 0.0, "chunk": 0}``, or
- ``{"scripts": [[...], [...]], "select": "image"}``: one script per episode, picked by the sha256 of the first
  image modulo the number of scripts (so verdicts vary across an archive, deterministically); ``"select": "seed"``
  picks by the conversation's sampling seed instead (so K rollouts of one spectrum differ, deterministically).

Log-probabilities
-----------------
With ``settings.top_logprobs`` > 0 every generated piece comes with a `TokenLogprob`. ``alternatives`` says what
the "model" weighed at a piece: a dict ``{piece: [[token, probability], ...]}`` (JSON: ``"alternatives"``) or a
callable ``(piece, sampling) -> list | None``. The piece's own log-probability is the log of its probability in
that list (1 when it is not listed); pieces without alternatives get probability 1 and no alternatives. The list
is cut to ``top_logprobs`` entries, most probable first, as a real engine reports it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from speco3.engine.base import (
    Engine,
    EngineSettings,
    EngineStats,
    GenerationResult,
    ModelInfo,
    Part,
    Sampling,
    StopReason,
    TokenCallback,
    TokenLogprob,
)
from speco3.errors import ContextFullError, EngineError
from speco3.imaging import PreparedImage

logger = logging.getLogger(__name__)

IM_END = "<|im_end|>"
_PIECE_RE = re.compile(r"<[^<>\s]{1,24}>|\s+|\w+|[^\w\s]", re.UNICODE)
Script = Sequence["str | BaseException"]
Alternatives = Mapping[str, Sequence[Sequence]] | Callable[[str, Sampling], "Sequence[Sequence] | None"]


def split_pieces(text: str, chunk: int = 0) -> list[str]:
    """Cut text into token-like pieces: tags, whitespace runs, words, single symbols (``chunk`` > 0: fixed size)."""
    if chunk > 0:
        return [text[i : i + chunk] for i in range(0, len(text), chunk)]
    return _PIECE_RE.findall(text)


def _text_tokens(text: str) -> int:
    """A rough token count for text parts (about 4 characters per token, as for BPE on English)."""
    return max(1, (len(text) + 3) // 4) if text else 0


class ScriptedEngine(Engine):
    """An `Engine` that replays scripted outputs.

    Parameters
    ----------
    outputs : list of str, or callable
        The script (see module doc), or ``callable(conversation) -> str``.
    chunk : int
        0: token-like pieces; > 0: fixed-size character pieces.
    scripts : list of lists, optional
        Alternative scripts, one chosen per episode by the first image's sha256.
    delay_s : float
        Sleep per piece (to emulate decoding speed in GUI tests and interruption tests).
    settings, info : optional
        Recorded like a real engine's; ``settings.n_ctx`` bounds the conversation (counted in rough tokens).
    alternatives : dict or callable, optional
        Scripted log-probabilities (see module doc), recorded when ``settings.top_logprobs`` > 0.
    select : {"image", "seed"}
        How one of several ``scripts`` is picked per episode.
    """

    def __init__(
        self,
        outputs: Script | Callable[[list[Part]], str] = (),
        *,
        chunk: int = 0,
        scripts: Sequence[Script] | None = None,
        delay_s: float = 0.0,
        settings: EngineSettings | None = None,
        info: ModelInfo | None = None,
        alternatives: Alternatives | None = None,
        select: str = "image",
    ):
        if select not in ("image", "seed"):
            raise EngineError(f"scripts are selected by 'image' or 'seed', not {select!r}")
        self.outputs = outputs
        self.alternatives = alternatives
        self.select = select
        self.scripts = list(scripts) if scripts else None
        self.chunk = int(chunk)
        self.delay_s = float(delay_s)
        self.settings = settings or EngineSettings()
        self.info = info or ModelInfo(model_id="scripted", quant="none")
        self.loaded = False
        self.closed = False
        self.conversation: list[Part] = []
        self.conversations: list[list[Part]] = []
        self.samplings: list[Sampling] = []  # the sampling of each conversation, as `reset` received it
        self.sampling = Sampling.from_settings(self.settings)
        self._pending: list[Part] = []
        self._turn = 0
        self._n_used = 0
        self._seen_images: set[str] = set()
        self._stats = EngineStats(backend="scripted", n_ctx=self.settings.n_ctx)

    # -- Engine API ------------------------------------------------------------------------------------
    def load(self) -> None:
        if self.closed:
            raise EngineError("scripted engine was closed")
        self.loaded = True

    def reset(self, *, sampling: Sampling | None = None) -> None:
        self.sampling = sampling or Sampling.from_settings(self.settings)
        self.samplings.append(self.sampling)
        self.conversation = []
        self.conversations.append(self.conversation)
        self._pending = []
        self._turn = 0
        self._n_used = 0

    def extend(self, parts: Sequence[Part]) -> None:
        for part in parts:
            if not isinstance(part, (str, PreparedImage)):
                raise EngineError(f"cannot extend the conversation with {type(part).__name__}")
        self.conversation.extend(parts)
        self._pending.extend(parts)

    def generate(
        self,
        *,
        max_tokens: int | None = None,
        on_token: TokenCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationResult:
        if not self.loaded:
            raise EngineError("engine not loaded")
        t0 = time.perf_counter()
        prompt_tokens, image_tokens, images = self._evaluate_pending()
        text = self._next_output()
        pieces = split_pieces(text, self.chunk)
        out: list[str] = []
        logprobs: list[TokenLogprob] = []
        reason: StopReason = "stop"
        for piece in pieces:
            if cancel is not None and cancel.is_set():
                reason = "cancelled"
                break
            if max_tokens is not None and len(out) >= max_tokens:
                reason = "length"
                break
            if self._n_used + 1 >= self.settings.n_ctx:
                reason = "context_full"
                break
            if self.delay_s:
                time.sleep(self.delay_s)
            out.append(piece)
            if self.settings.top_logprobs > 0:
                logprobs.append(self._logprob(piece))
            self._n_used += 1
            if on_token is not None:
                on_token(piece)
        generated = "".join(out)
        self.conversation.append(generated + (IM_END if reason == "stop" else ""))
        if reason == "stop":
            self._n_used += 1
        seconds = time.perf_counter() - t0
        self._turn += 1
        s = self._stats
        s.tokens_generated += len(out)
        s.kv_cells_used = self._n_used
        s.decode_tokens_per_s = len(out) / seconds if seconds > 0 else 0.0
        return GenerationResult(
            text=generated, n_tokens=len(out), stop_reason=reason, seconds=seconds,
            prompt_tokens=prompt_tokens, image_tokens=image_tokens, images_encoded=images, logprobs=logprobs,
        )

    def stats(self) -> EngineStats:
        return self._stats

    def close(self) -> None:
        self.closed = True
        self.loaded = False

    # -- helpers ---------------------------------------------------------------------------------------
    def _evaluate_pending(self) -> tuple[int, int, int]:
        text_tokens = image_tokens = images = 0
        for part in self._pending:
            if isinstance(part, PreparedImage):
                image_tokens += part.n_tokens
                if part.sha256 not in self._seen_images:
                    images += 1
                    self._seen_images.add(part.sha256)
            else:
                text_tokens += _text_tokens(part)
        needed = self._n_used + text_tokens + image_tokens
        if needed >= self.settings.n_ctx:
            raise ContextFullError(
                f"the conversation needs {needed} KV cells but the context holds {self.settings.n_ctx}"
            )
        self._pending = []
        self._n_used = needed
        s = self._stats
        s.text_tokens_evaluated += text_tokens
        s.image_tokens_encoded += image_tokens
        s.images_encoded += images
        return text_tokens, image_tokens, images

    def _logprob(self, piece: str) -> TokenLogprob:
        alts = self.alternatives
        listed = alts(piece, self.sampling) if callable(alts) else (alts or {}).get(piece)
        if not listed:
            return TokenLogprob(piece, 0.0)
        try:
            pairs = sorted(((str(t), float(p)) for t, p in listed), key=lambda tp: -tp[1])
        except (TypeError, ValueError) as exc:
            raise EngineError(f"alternatives of {piece!r} must be [token, probability] pairs ({exc})") from exc
        if any(not 0.0 < p <= 1.0 for _, p in pairs):
            raise EngineError(f"alternatives of {piece!r}: probabilities must be in (0, 1]")
        own = next((p for t, p in pairs if t == piece), 1.0)
        top = tuple((t, math.log(p)) for t, p in pairs[: self.settings.top_logprobs])
        return TokenLogprob(piece, math.log(own), top)

    def _current_script(self) -> Script:
        if self.scripts:
            if self.select == "seed":
                return self.scripts[self.sampling.seed % len(self.scripts)]
            first = next((p for p in self.conversation if isinstance(p, PreparedImage)), None)
            key = int(first.sha256[:8], 16) if first is not None else 0
            return self.scripts[key % len(self.scripts)]
        return self.outputs  # type: ignore[return-value]

    def _next_output(self) -> str:
        if callable(self.outputs) and not self.scripts:
            result = self.outputs(list(self.conversation))
            if not isinstance(result, str):
                raise EngineError(f"script callable returned {type(result).__name__}, not str")
            return result
        script = self._current_script()
        if self._turn >= len(script):
            raise EngineError(f"script exhausted after {len(script)} outputs")
        item = script[self._turn]
        if isinstance(item, BaseException):
            raise item
        return str(item)


def load_script(path: str | Path, **kwargs) -> ScriptedEngine:
    """A `ScriptedEngine` from a JSON script file (see module doc). Raises `EngineError` naming the file."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EngineError(f"{path}: cannot read script ({exc})") from exc

    def strings(value, what: str) -> list[str]:
        if not isinstance(value, list) or not value or not all(isinstance(s, str) for s in value):
            raise EngineError(f"{path}: {what} must be a non-empty list of strings")
        return value

    if isinstance(data, list):
        return ScriptedEngine(strings(data, "the script"), **kwargs)
    if not isinstance(data, dict):
        raise EngineError(f"{path}: a script is a list of outputs or an object")
    opts = {"delay_s": data.get("delay_s", 0.0), "chunk": data.get("chunk", 0)}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in opts.values()):
        raise EngineError(f"{path}: 'delay_s' and 'chunk' must be non-negative numbers")
    opts["chunk"] = int(opts["chunk"])
    if "alternatives" in data:
        alts = data["alternatives"]
        if not isinstance(alts, dict) or not all(isinstance(v, list) for v in alts.values()):
            raise EngineError(f"{path}: 'alternatives' must map a piece to a list of [token, probability] pairs")
        opts["alternatives"] = alts
    if data.get("select", "image") not in ("image", "seed"):
        raise EngineError(f"{path}: 'select' must be 'image' or 'seed'")
    opts["select"] = data.get("select", "image")
    opts.update(kwargs)
    if "scripts" in data:
        if not isinstance(data["scripts"], list) or not data["scripts"]:
            raise EngineError(f"{path}: 'scripts' must be a non-empty list of scripts")
        scripts = [strings(s, f"scripts[{i}]") for i, s in enumerate(data["scripts"])]
        return ScriptedEngine(scripts=scripts, **opts)
    if "outputs" in data:
        return ScriptedEngine(strings(data["outputs"], "'outputs'"), **opts)
    raise EngineError(f"{path}: the object needs 'outputs' or 'scripts'")
