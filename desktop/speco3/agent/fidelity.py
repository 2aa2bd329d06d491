"""Does a model server feed the model what the local engine feeds it? (``spec-o3 server check URL``)

A two-turn Spec-o3 conversation (system + tools, the first user turn with an image, an assistant answer with a
tool call, a tool turn with a zoom image) is built once as messages (`speco3.agent.protocol`) and rendered three
ways:

- ``local``: the markup the in-process engine is fed (`protocol.markup`, the RL form);
- ``training``: the Spec-o3 training template (`speco3_converters.chat_template`, rendered like transformers);
- ``server``: the prompt the server builds: llama-server's ``POST /apply-template``; vLLM's / SGLang's
  ``POST /tokenize`` with the messages, then ``/detokenize`` (image placeholders collapsed to one).

The server must agree with the training template byte by byte; where it does not, every differing span is
reported (offset and both texts) and a long run is warned about. ``training`` and ``local`` differ in one known way:
in the RL rollouts a tool turn followed the sampled ``<|im_end|>`` directly, where a chat template writes
``<|im_end|>\\n``; that is listed as known, not as a fault. A one-token request with the first turn then gives the
prompt size the server counts, from which the image tokens it uses are compared with the local image's.
"""

from __future__ import annotations

import difflib
import io
import logging
import re
from dataclasses import asdict, dataclass, field

from speco3.agent.protocol import (
    IM_END,
    IMAGE_PLACEHOLDER,
    first_turn_messages,
    markup,
    render_prompt,
    tool_turn_messages,
)
from speco3.agent.tasks import get_task
from speco3.engine.base import Message
from speco3.engine.chatapi import ServerConfig, ServerError
from speco3.engine.remote import RemoteEngine, to_openai
from speco3.imaging import PreparedImage, prepare_image

logger = logging.getLogger(__name__)

ANSWER = ('<think>\nThe full view needs a closer look.\n</think>\n<tool_call>\n{"name": "spectral_visualization_tool", '
          '"arguments": {"wavelength_range": [6500, 6600], "label": "Hα"}}\n</tool_call>')
TOOL_TEXT = "Generated spectral visualization focused on wavelength range (6500, 6600) Å for Hα."
_MEDIA = re.compile(r"<__media_?[A-Za-z0-9_]*__>|<\|vision_start\|>(?:<\|image_pad\|>)+<\|vision_end\|>")


@dataclass
class Difference:
    offset: int  # in the reference text (characters)
    reference: str
    server: str


@dataclass
class FidelityReport:
    server: str
    model: str = ""
    kind: str = ""
    method: str = ""
    same: bool = False
    differences: list[Difference] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    local_image_tokens: int = 0
    server_image_tokens: int | None = None
    image_size: str = ""
    error: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"server {self.server} · model {self.model} · {self.kind} · prompt from {self.method or '?'}"]
        if self.error:
            lines.append(f"could not check: {self.error}")
            return "\n".join(lines)
        if self.same:
            lines.append("prompt: identical to the Spec-o3 training template, byte for byte")
        else:
            lines.append(f"WARNING: the server's prompt differs from the Spec-o3 training template in "
                         f"{len(self.differences)} place(s); the model will not see what it was trained on:")
            for d in self.differences[:20]:
                lines.append(f"  at byte {d.offset}: expected {d.reference!r}, server has {d.server!r}")
        for k in self.known:
            lines.append(f"known: {k}")
        if self.server_image_tokens is None:
            lines.append(f"image: {self.image_size}, {self.local_image_tokens} tokens locally; the server's count "
                         "is unknown")
        else:
            same = self.server_image_tokens == self.local_image_tokens
            lines.append(f"image: {self.image_size} → {self.local_image_tokens} tokens locally, "
                         f"{self.server_image_tokens} on the server" + ("" if same else
                         " — WARNING: the server resizes images differently (check its image token limits)"))
        return "\n".join(lines)


def _probe_image() -> PreparedImage:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (560, 336), "white")
    ImageDraw.Draw(img).line([(20, 300), (200, 80), (380, 260), (540, 40)], fill="black", width=3)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return prepare_image(buf.getvalue())


def diff_text(reference: str, server: str) -> list[Difference]:
    """Every span where ``server`` differs from ``reference`` (offsets in UTF-8 bytes of the reference)."""
    out = []
    sm = difflib.SequenceMatcher(None, reference, server, autojunk=False)
    for op, a0, a1, b0, b1 in sm.get_opcodes():
        if op != "equal":
            out.append(Difference(len(reference[:a0].encode("utf-8")), reference[a0:a1], server[b0:b1]))
    return out


def conversation() -> tuple[list[Message], list[dict], list[dict], str, PreparedImage]:
    """The probe conversation: its first turn as messages, the whole as OpenAI messages + tools, its local markup
    text, and the image used."""
    image = _probe_image()
    first = first_turn_messages(image, get_task("cv").text)
    tool = tool_turn_messages(image, TOOL_TEXT)
    msgs, tools = to_openai(first)
    tmsgs, _ = to_openai(tool)
    local = render_prompt(markup(first)) + ANSWER + IM_END + render_prompt(markup(tool))
    return first, [*msgs, {"role": "assistant", "content": ANSWER}, *tmsgs], tools, local, image


def training_prompt(messages: list[dict], tools: list[dict]) -> str:
    """OpenAI messages through the Spec-o3 training template (images as the ``{"type": "image"}`` parts it reads)."""
    from speco3_converters.chat_template import render

    hf = [{**m, "content": [{"type": "image"} if c["type"] == "image_url" else c for c in m["content"]]}
          if isinstance(m["content"], list) else m for m in messages]
    return render(hf, tools)


def server_prompt(engine: RemoteEngine, messages: list[dict], tools: list[dict]) -> tuple[str, str]:
    """The server's prompt text for ``messages`` (images collapsed to the placeholder) and the endpoint used."""
    client = engine.client
    if engine.server_kind == "llama.cpp":
        got = client.post_json("/apply-template", {"messages": messages, "tools": tools, "tool_choice": "none"})
        return _MEDIA.sub(IMAGE_PLACEHOLDER, got["prompt"]), "/apply-template"
    body = {"model": engine.config.model, "messages": messages, "tools": tools, "add_generation_prompt": True}
    last: Exception | None = None
    for path in ("/tokenize", "/v1/tokenize"):
        try:
            tokens = client.post_json(path, body)["tokens"]
            text = client.post_json(path.replace("tokenize", "detokenize"),
                                    {"model": engine.config.model, "tokens": tokens})["prompt"]
            return _MEDIA.sub(IMAGE_PLACEHOLDER, text), path
        except (ServerError, KeyError, TypeError) as exc:
            last = exc
    raise ServerError(f"the server offers no template endpoint this check knows (/apply-template, /tokenize): {last}")


def check_server(config: ServerConfig) -> FidelityReport:
    """Compare the server's prompt with the training template and the local markup (see module doc)."""
    report = FidelityReport(server=config.url)
    engine = RemoteEngine(config)
    try:
        engine.load()
        report.model, report.kind = engine.info.model_id, engine.server_kind
        first, messages, tools, local, image = conversation()
        report.local_image_tokens, report.image_size = image.n_tokens, f"{image.width}×{image.height} px"
        training = training_prompt(messages, tools)
        served, report.method = server_prompt(engine, messages, tools)
        report.differences = diff_text(training, served)
        report.same = not report.differences
        if training != local:
            report.known = [f"local engine (RL form) vs chat template at byte {d.offset}: local {d.server!r}, "
                            f"template {d.reference!r}" for d in diff_text(training, local)]
        report.server_image_tokens = _server_image_tokens(engine, first)
    except Exception as exc:  # report what is known so far; the CLI turns it into an error
        logger.info("server check failed", exc_info=True)
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        engine.close()
    return report


def _server_image_tokens(engine: RemoteEngine, first: list[Message]) -> int | None:
    """Image tokens the server counts for the first turn's image (llama-server): its prompt size for a 1-token
    request, less the text tokens of that prompt (/tokenize; the placeholder's 3 tokens stand for the image, and
    mtmd writes ``<|vision_start|>`` + the image tokens + ``<|vision_end|>``)."""
    engine.reset()
    engine.extend_messages(first)
    usage: dict = {}
    engine.client.stream_chat(engine.request_body(1), lambda c: usage.update(c.get("usage") or {}))
    total = usage.get("prompt_tokens")
    if not total or engine.server_kind != "llama.cpp":
        return None
    msgs, tools = to_openai(first)
    n_text = len(engine.client.post_json("/tokenize", {"content": training_prompt(msgs, tools)})["tokens"])
    return int(total) - (n_text - 3) - 2
