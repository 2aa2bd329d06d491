"""`RemoteEngine`: the model served by an OpenAI-compatible server (llama.cpp's llama-server, vLLM, SGLang).

The agent feeds it structured messages (`Engine.takes_messages`; `speco3.agent.protocol` builds them): the system
message's tool schemas go out as ``tools`` so that the server's chat template writes the tools block the model was
trained on, images as base64 PNG data URLs (the very pixels the local engine would encode), tool results as
``tool`` messages. Each assistant answer is kept verbatim and sent back as the assistant message's content, so the
template writes it unchanged. ``tool_choice`` is ``"none"`` and llama-server is asked not to split reasoning off,
so the answer comes back as the model wrote it (``<tool_call>`` text included); a server that parses tool calls or
reasoning anyway (``tool_calls``, ``reasoning_content``) has them written back into the text in the trained form.

`spec-o3 server check` (`speco3.engine.server_check`) compares what the server's template makes of a conversation
with the local markup, byte by byte. The one known difference with the Spec-o3 template: the RL form appends a
tool turn directly after the sampled ``<|im_end|>``, a chat template writes ``<|im_end|>\\n`` first.

One conversation per instance (like every engine); several instances may share one `ChatClient` from several
threads, which is how ``vet --concurrency N`` keeps N conversations in flight for the server to batch.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from speco3.engine.base import (
    Engine,
    EngineSettings,
    EngineStats,
    GenerationResult,
    Message,
    ModelInfo,
    Part,
    Sampling,
    StopReason,
    TokenCallback,
    TokenLogprob,
)
from speco3.engine.chatapi import ChatClient, ServerConfig, ServerError
from speco3.errors import EngineError
from speco3.imaging import PreparedImage

logger = logging.getLogger(__name__)


@dataclass
class RemoteSettings(EngineSettings):
    """Engine settings of a remote run; ``server`` and ``served_model`` are recorded with every verdict."""

    server: str = ""
    served_model: str = ""


#: Settings of the in-process engine that mean nothing for a server (it loaded the model its own way): left out of
#: what a remote run records, so a verdict never carries the local defaults as if they had run.
LOCAL_ONLY = ("n_threads", "n_gpu_layers", "flash_attn", "mmproj_on_gpu", "kv_type", "use_mmap", "image_cache_mib")
#: What a server says about the digests of its model files: neither llama-server nor vLLM reports any.
NOT_VERIFIED = "unknown, not verified (the server reports no digest of its model files)"


def _number(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def server_report(kind: str, model: dict, props: dict) -> dict:
    """What a server reports about the model it serves (recorded with every verdict as ``server_reports``): its id,
    file, quantization (llama-server's file type), size and parameters, its context per conversation and its slots (llama-server: ``/props`` and ``/v1/models``;
    vLLM: ``/v1/models``' ``max_model_len`` and ``root``), its build, and that the digests are not verified.
    Values the server does not report are None."""
    meta, gen = model.get("meta"), props.get("default_generation_settings")
    meta = meta if isinstance(meta, dict) else {}
    gen = gen if isinstance(gen, dict) else {}
    text = lambda v: v if isinstance(v, str) and v else None  # noqa: E731
    return {"kind": kind, "model": text(model.get("id")),
            "model_path": text(props.get("model_path")) or text(model.get("root")),
            "n_ctx": _number(gen.get("n_ctx")) or _number(meta.get("n_ctx")) or _number(model.get("max_model_len")),
            "slots": _number(props.get("total_slots")), "n_ctx_train": _number(meta.get("n_ctx_train")),
            "n_params": _number(meta.get("n_params")), "size_bytes": _number(meta.get("size")),
            "quant": text(props.get("model_ftype")) or text(meta.get("ftype")),
            "build": text(props.get("build_info")), "digests": NOT_VERIFIED}


def image_url(image: PreparedImage) -> dict:
    """An OpenAI ``image_url`` content part carrying the prepared PNG as a base64 data URL."""
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(image.png).decode()}}


def to_openai(messages: Sequence[Message]) -> tuple[list[dict], list[dict]]:
    """OpenAI chat messages and tools for structured messages (text parts joined; images as data URLs)."""
    out: list[dict] = []
    tools: list[dict] = []
    for m in messages:
        tools += [dict(t) for t in m.tools]
        parts: list[dict] = []
        for p in m.content:
            if isinstance(p, PreparedImage):
                parts.append(image_url(p))
            elif isinstance(p, str):
                if parts and parts[-1]["type"] == "text":
                    parts[-1]["text"] += p
                elif p:
                    parts.append({"type": "text", "text": p})
            else:
                raise TypeError(f"a message part must be str or PreparedImage, not {type(p).__name__}")
        if all(p["type"] == "text" for p in parts):
            out.append({"role": m.role, "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": m.role, "content": parts})
    return out, tools


def tool_calls_as_text(calls: dict[int, dict]) -> str:
    """Tool calls parsed by the server written back in the trained ``<tool_call>`` form."""
    out = []
    for _, call in sorted(calls.items()):
        try:
            arguments = json.loads(call.get("arguments") or "{}")
        except ValueError:
            arguments = call.get("arguments")
        body = json.dumps({"name": call.get("name", ""), "arguments": arguments}, ensure_ascii=False)
        out.append(f"<tool_call>\n{body}\n</tool_call>")
    return "\n".join(out)


@dataclass
class _Answer:
    """One streamed answer, accumulated chunk by chunk."""

    content: str = ""
    reasoning: str = ""
    calls: dict[int, dict] = field(default_factory=dict)
    finish: str | None = None
    n_chunks: int = 0
    usage: dict = field(default_factory=dict)
    logprobs: list[TokenLogprob] = field(default_factory=list)

    def text(self) -> str:
        text = self.content
        if self.reasoning:
            text = f"<think>{self.reasoning}</think>" + text
        if self.calls:
            text = (text + "\n" if text else "") + tool_calls_as_text(self.calls)
        return text


class RemoteEngine(Engine):
    """An `Engine` over an OpenAI-compatible chat-completions server (see module doc).

    Parameters
    ----------
    config : ServerConfig or str
        The server (a bare URL is a config with the defaults).
    settings : EngineSettings, optional
        Answer budget, sampling defaults, ``top_logprobs`` (when the settings have it); model-loading fields
        (threads, GPU layers, ...) do not apply to a server.
    client : ChatClient, optional
        Share one client (its connection pool) between engines running on several threads.
    """

    takes_messages = True
    settings: RemoteSettings

    def __init__(self, config: ServerConfig | str, settings: EngineSettings | None = None, *,
                 client: ChatClient | None = None):
        self.config = ServerConfig(config) if isinstance(config, str) else config
        base = settings or EngineSettings()
        self.settings = RemoteSettings(**{**base.to_dict(), "server": self.config.url,
                                          "served_model": self.config.model or ""})
        self.info = ModelInfo(model_id=self.config.model or "unknown", server=self.config.url)
        self._client = client
        self._own_client = client is None
        self._messages: list[dict] = []
        self._tools: list[dict] = []
        self._sampling = Sampling.from_settings(self.settings)
        self._stats = EngineStats(backend=f"server {self.config.host}")
        self._server_kind = "unknown"
        self._server: dict = {}  # what the server reports about its model (`server_report`), once loaded
        self._loaded = False
        self._t_decode = 0.0

    # ------------------------------------------------------------------ lifecycle
    @property
    def client(self) -> ChatClient:
        if self._client is None:
            raise EngineError("the remote engine is not loaded (call load() first)")
        return self._client

    @property
    def server_kind(self) -> str:
        """``llama.cpp`` for llama-server, else what the server's model list says owns the model (``vllm``, …)."""
        return self._server_kind

    def load(self) -> None:
        if self._loaded:
            return
        t0 = time.perf_counter()
        if self._client is None:
            self._client = ChatClient(self.config)
        listing = self.client.get_json("/v1/models")
        models = [m for m in (listing.get("data") or []) if isinstance(m, dict) and m.get("id")]
        ids = [m["id"] for m in models]
        if not self.config.model:
            if not ids:
                raise ServerError(f"{self.config.url} lists no model; name one with --model")
            self.config.model = ids[0]
        elif ids and self.config.model not in ids:
            logger.warning("%s does not list model %r (it lists %s)", self.config.host, self.config.model, ids)
        entry = next((m for m in models if m["id"] == self.config.model), {})
        owner = entry.get("owned_by")
        self._server_kind = "llama.cpp" if owner == "llamacpp" else str(owner or "unknown")
        props: dict = {}
        if self._server_kind == "llama.cpp":
            try:
                props = dict(self.client.get_json("/props"))
            except ServerError as exc:  # an older llama-server: its context and slots go unrecorded, said so
                logger.warning("%s: /props not readable (%s): the server's context and slots are not recorded",
                               self.config.host, exc)
        self._server = server_report(self._server_kind, entry, props)
        self.settings.served_model = self.config.model
        self.info = ModelInfo(model_id=self.config.model, quant=self._server["quant"], server=self.config.url)
        self._stats.load_seconds = time.perf_counter() - t0
        self._stats.extra["server_kind"] = self._server_kind
        self._loaded = True
        logger.info("model %s on %s (%s): context %s per conversation, %s slots; file digests %s", self.config.model,
                    self.config.host, self._server_kind, self._server["n_ctx"] or "unreported",
                    self._server["slots"] or "unreported", NOT_VERIFIED)

    def recorded_settings(self) -> dict:
        """The settings that apply to a server run (the answer budget, sampling, image size; not the in-process
        engine's `LOCAL_ONLY` loading options), its context and slots as the server reports them (None when it
        does not) in place of the local defaults, and ``server``: what it reports about its model
        (`server_report`)."""
        d = {k: v for k, v in self.settings.to_dict().items() if k not in LOCAL_ONLY}
        d["n_ctx"], d["n_seq"] = self._server.get("n_ctx"), self._server.get("slots")
        if self._server:
            d["server_reports"] = dict(self._server)
        return d

    def close(self) -> None:
        if self._client is not None and self._own_client:
            self._client.close()
        self._client, self._loaded = None, False

    # ------------------------------------------------------------------ conversation
    def reset(self, *, sampling: Sampling | None = None) -> None:
        self._messages, self._tools = [], []
        self._sampling = sampling or Sampling.from_settings(self.settings)

    def extend_messages(self, messages: Sequence[Message]) -> None:
        msgs, tools = to_openai(messages)
        self._messages += msgs
        self._tools += tools

    def extend(self, parts: Sequence[Part]) -> None:
        raise EngineError("a chat server takes structured messages (extend_messages), not chat-markup parts")

    def messages(self) -> list[dict]:
        """The conversation as sent to the server (a copy)."""
        return json.loads(json.dumps(self._messages))

    def request_body(self, max_tokens: int) -> dict:
        """The chat-completions request for the conversation so far."""
        s = self._sampling
        body: dict = {"model": self.config.model, "messages": self._messages, "stream": True,
                      "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
                      "temperature": s.temperature, "top_p": s.top_p, "seed": s.seed}
        if s.top_k > 0:
            body["top_k"] = s.top_k
        if self._tools:
            body["tools"], body["tool_choice"] = self._tools, "none"
        if self._server_kind == "llama.cpp":
            body["reasoning_format"] = "none"  # keep <think> in the content, as the model wrote it
            # the local sampler's chain (speco3.engine.sampling): no min-p, no top-k unless asked (server defaults
            # are min_p 0.05 and top_k 40)
            body.update(top_k=s.top_k, min_p=0.0)
        n_top = self.settings.top_logprobs
        if n_top > 0:
            body["logprobs"], body["top_logprobs"] = True, n_top
            if self._server_kind == "llama.cpp" and self._tools:  # it refuses logprobs with tools in a stream
                body["stream"] = False
                del body["stream_options"]
        return body

    # ------------------------------------------------------------------ generation
    def generate(self, *, max_tokens: int | None = None, on_token: TokenCallback | None = None,
                 cancel: threading.Event | None = None) -> GenerationResult:
        if not self._messages:
            raise EngineError("nothing to generate from: the conversation is empty")
        max_tokens = int(self.settings.max_tokens_per_turn if max_tokens is None else max_tokens)
        if max_tokens < 1:
            raise EngineError(f"max_tokens must be at least 1, got {max_tokens}")
        t0 = time.perf_counter()
        answer = _Answer()
        emitted = [0]  # characters already given to on_token (a retried request does not repeat them)

        def on_chunk(chunk: dict) -> None:
            if chunk.get("usage"):
                answer.usage = chunk["usage"]
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                piece = delta.get("content") or ""
                answer.content += piece
                answer.reasoning += delta.get("reasoning_content") or ""
                for tc in delta.get("tool_calls") or []:
                    call = answer.calls.setdefault(int(tc.get("index", 0)), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    call["name"] += fn.get("name") or ""
                    call["arguments"] += fn.get("arguments") or ""
                answer.logprobs += _logprobs(choice.get("logprobs"))
                answer.finish = choice.get("finish_reason") or answer.finish
                answer.n_chunks += bool(piece)
                if on_token is not None and len(answer.content) > emitted[0]:
                    on_token(answer.content[emitted[0]:])
                    emitted[0] = len(answer.content)

        def restart() -> None:
            nonlocal answer
            answer = _Answer()

        body = self.request_body(max_tokens)
        if body["stream"]:
            finished = self.client.stream_chat(body, on_chunk, cancel, on_retry=restart)
        else:  # one JSON answer, read as a single chunk
            on_chunk(_as_chunk(self.client.post_json("/v1/chat/completions", body)))
            finished = True
        text = answer.text()
        self._messages.append({"role": "assistant", "content": text})
        reason: StopReason = "cancelled" if not finished else ("length" if answer.finish == "length" else "stop")
        n_tokens = int(answer.usage.get("completion_tokens") or len(answer.logprobs) or answer.n_chunks)
        seconds = time.perf_counter() - t0
        st = self._stats
        st.tokens_generated += n_tokens
        st.text_tokens_evaluated += int(answer.usage.get("prompt_tokens") or 0)
        self._t_decode += seconds
        st.decode_tokens_per_s = st.tokens_generated / self._t_decode if self._t_decode > 0 else 0.0
        st.extra["requests_retried"] = self.client.retried
        return GenerationResult(text=text, n_tokens=n_tokens, stop_reason=reason, seconds=seconds,
                                prompt_tokens=int(answer.usage.get("prompt_tokens") or 0), logprobs=answer.logprobs)

    def stats(self) -> EngineStats:
        return EngineStats(**{**self._stats.__dict__, "extra": dict(self._stats.extra)})


def _as_chunk(response: dict) -> dict:
    """A non-streamed chat completion in the form of one stream chunk (its message as the delta)."""
    choices = []
    for c in response.get("choices") or []:
        delta = dict(c.get("message") or {})
        delta["tool_calls"] = [{**tc, "index": i} for i, tc in enumerate(delta.get("tool_calls") or [])]
        choices.append({"delta": delta, "logprobs": c.get("logprobs"), "finish_reason": c.get("finish_reason")})
    return {"choices": choices, "usage": response.get("usage")}


def _logprobs(block: dict | None) -> list[TokenLogprob]:
    out = []
    for item in (block or {}).get("content") or []:
        top = tuple((t.get("token", ""), float(t.get("logprob", 0.0))) for t in item.get("top_logprobs") or [])
        out.append(TokenLogprob(item.get("token", ""), float(item.get("logprob", 0.0)), top))
    return out


__all__ = ["RemoteEngine", "RemoteSettings", "ServerConfig", "image_url", "to_openai"]
