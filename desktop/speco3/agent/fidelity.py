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
``<|im_end|>\\n``; that is listed as known, not as a fault.

The image tokens the server makes of our images, the full view and the zoom (its own resize rule and limits), are
measured and compared with the local images' (`speco3.imaging.smart_resize` at the model size): where the template
endpoint expands the images (vLLM's ``/tokenize``: ``<|image_pad|>`` once per image token) they are counted there;
elsewhere (llama-server) each is the prompt size (``usage.prompt_tokens``) of a one-token completion of the first
turn with that image, less that of the same turn without it, less the ``<|vision_start|>``/``<|vision_end|>`` pair
around the image. The probe images have the sizes of the renderer's full view and 100 Å zoom (docs/design.md §3).

A server whose template cannot render the conversation (vLLM answers HTTP 500 "Failed to apply prompt replacement
for mm_items['image'][1]" when it runs a checkpoint's own template on a tool turn with an image) is reported as a
template failure with the fix (``--chat-template`` with the Spec-o3 template), not as a missing endpoint.
"""

from __future__ import annotations

import difflib
import io
import logging
import re
from dataclasses import asdict, dataclass, field
from importlib import resources

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
#: The renderer's full view and 100 Å zoom of a LAMOST spectrum (docs/design.md §3): 784×476 and 588×364 at the
#: model size, 476 and 273 image tokens.
FULL_VIEW_PX, ZOOM_VIEW_PX = (792, 472), (596, 352)
#: Statuses that say an endpoint does not exist (another one is tried), and those that say nothing of the template
#: (the key, a timeout, a busy server); any other error answer is the template's.
_NO_ENDPOINT = frozenset({404, 405})
_NOT_THE_TEMPLATE = frozenset({401, 403, 408, 429}) | _NO_ENDPOINT
_MEDIA = re.compile(r"<__media_?[A-Za-z0-9_]*__>|<\|vision_start\|>(?:<\|image_pad\|>)+<\|vision_end\|>")
_PAD = "<|image_pad|>"
_EXPANDED = re.compile(r"<\|vision_start\|>((?:<\|image_pad\|>)+)<\|vision_end\|>")


@dataclass
class ServedPrompt:
    """The server's prompt for the probe conversation: its text with every image collapsed to the placeholder, the
    endpoint that gave it, and the image tokens of each image where the endpoint expands them (vLLM's /tokenize)."""

    text: str
    method: str
    image_tokens: list[int] = field(default_factory=list)

    @classmethod
    def from_raw(cls, raw: str, method: str) -> ServedPrompt:
        pads = [len(m.group(1)) // len(_PAD) for m in _EXPANDED.finditer(raw)]
        return cls(_MEDIA.sub(IMAGE_PLACEHOLDER, raw), method, [n for n in pads if n > 1])


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
    local_image_tokens: int = 0  # the full view's
    server_image_tokens: int | None = None
    image_size: str = ""
    local_zoom_tokens: int = 0  # the zoom's (the tool turn's image)
    server_zoom_tokens: int | None = None
    zoom_size: str = ""
    image_count_from: str = ""
    template_failure: str = ""
    error: str = ""

    @property
    def image_differs(self) -> bool:
        """The server counts a different number of image tokens for one of our images (unknown counts do not
        differ)."""
        return (self.server_image_tokens not in (None, self.local_image_tokens)
                or self.server_zoom_tokens not in (None, self.local_zoom_tokens))

    @property
    def faithful(self) -> bool:
        """The server's prompt is the training template's and it sees our image at our size."""
        return self.same and not self.image_differs and not self.template_failure

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        lines = [f"server {self.server} · model {self.model} · {self.kind} · prompt from {self.method or '?'}"]
        if self.error:
            lines.append(f"could not check: {self.error}")
            return "\n".join(lines)
        if self.template_failure:
            lines.append(f"FAILED: {self.template_failure}")
        elif self.same:
            lines.append("prompt: identical to the Spec-o3 training template, byte for byte")
        else:
            lines.append(f"WARNING: the server's prompt differs from the Spec-o3 training template in "
                         f"{len(self.differences)} place(s); the model will not see what it was trained on:")
            for d in self.differences[:20]:
                lines.append(f"  at byte {d.offset}: expected {d.reference!r}, server has {d.server!r}")
            lines.append(f"fix: serve the Spec-o3 template ({template_file()}): vLLM / SGLang --chat-template FILE, "
                         "llama-server --jinja with our GGUF or --chat-template-file FILE")
        for k in self.known:
            lines.append(f"known: {k}")
        for what, size, local, server in (("image", self.image_size, self.local_image_tokens, self.server_image_tokens),
                                          ("zoom", self.zoom_size, self.local_zoom_tokens, self.server_zoom_tokens)):
            if server is None:
                lines.append(f"{what}: {size}, {local} tokens locally; the server's count is unknown (it reports no "
                             "prompt size)")
            else:
                lines.append(f"{what}: {size} → {local} tokens locally, {server} on the server (counted from "
                             f"{self.image_count_from})" + (": the same" if server == local else
                             " — WARNING: the server resizes images differently (check its image token limits)"))
        return "\n".join(lines)


class TemplateFailure(ServerError):
    """The server's chat template cannot render a Spec-o3 conversation (the server answered, with an error)."""


def template_file() -> str:
    """Path of the Spec-o3 chat template to pass to a server (``--chat-template``)."""
    from speco3_converters.chat_template import TEMPLATE_FILE

    return str(resources.files("speco3_converters").joinpath(TEMPLATE_FILE))


def _probe_image(size: tuple[int, int]) -> PreparedImage:
    from PIL import Image, ImageDraw

    w, h = size
    img = Image.new("RGB", size, "white")
    ImageDraw.Draw(img).line([(20, h - 36), (w // 3, 80), (2 * w // 3, h - 76), (w - 20, 40)], fill="black", width=3)
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
    image = _probe_image(FULL_VIEW_PX)
    first = first_turn_messages(image, get_task("cv").text)
    tool = tool_turn_messages(_probe_image(ZOOM_VIEW_PX), TOOL_TEXT)
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


def server_prompt(engine: RemoteEngine, messages: list[dict], tools: list[dict]) -> ServedPrompt:
    """The server's prompt for ``messages`` (see `ServedPrompt`).

    Raises `TemplateFailure` when the server answers the conversation with an error while it renders its first
    turn (a template that breaks on the tool turn), `ServerError` when it offers none of the endpoints."""
    last: ServerError | None = None
    paths = ("/apply-template",) if engine.server_kind == "llama.cpp" else ("/tokenize", "/v1/tokenize")
    for path in paths:
        try:
            return ServedPrompt.from_raw(_rendered(engine, path, messages, tools, retries=0), path)
        except ServerError as exc:
            if exc.status in _NO_ENDPOINT:
                last = exc
                continue
            if exc.status is None or exc.status in _NOT_THE_TEMPLATE:
                raise
            _raise_template_failure(engine, path, messages, tools, exc)
            return ServedPrompt.from_raw(_rendered(engine, path, messages, tools), path)  # that was transient
    raise ServerError(f"the server offers no template endpoint this check knows ({', '.join(paths)}): {last}")


def _rendered(engine: RemoteEngine, path: str, messages: list[dict], tools: list[dict],
              retries: int | None = None) -> str:
    client, model = engine.client, engine.config.model
    if path == "/apply-template":
        got = client.post_json(path, {"messages": messages, "tools": tools, "tool_choice": "none"}, retries=retries)
        return str(got["prompt"])
    body = {"model": model, "messages": messages, "tools": tools, "add_generation_prompt": True}
    tokens = client.post_json(path, body, retries=retries)["tokens"]
    return str(client.post_json(path.replace("tokenize", "detokenize"), {"model": model, "tokens": tokens})["prompt"])


def _raise_template_failure(engine: RemoteEngine, path: str, messages: list[dict], tools: list[dict],
                            failed: ServerError) -> None:
    """Tell a template that fails on the conversation from a transient failure: the first turn alone is rendered
    (with retries); when it is and the whole conversation fails again, the template fails on the tool turn."""
    first = messages[:next(i for i, m in enumerate(messages) if m["role"] == "assistant")]
    fix = f"pass --chat-template {template_file()} (the template Spec-o3 was trained with)"
    try:
        _rendered(engine, path, first, tools)
    except ServerError as exc:
        if exc.status is None or exc.status in _NOT_THE_TEMPLATE:
            raise
        raise TemplateFailure(f"the server's template fails on the first turn (system, tools, image): {fix}; "
                              f"the server answered {path}: {exc}", exc.status) from exc
    try:
        _rendered(engine, path, messages, tools, retries=0)
    except ServerError as exc:
        if exc.status is None or exc.status in _NOT_THE_TEMPLATE:
            raise
        raise TemplateFailure(f"the server's template fails on a tool turn with an image: {fix}; the server "
                              f"answered {path}: {exc}", exc.status) from exc
    logger.info("%s failed once, then rendered the conversation: %s", path, failed)


def check_server(config: ServerConfig) -> FidelityReport:
    """Compare the server's prompt with the training template and the local markup (see module doc)."""
    report = FidelityReport(server=config.url)
    engine = RemoteEngine(config)
    try:
        engine.load()
        report.model, report.kind = engine.info.model_id, engine.server_kind
        _, messages, tools, local, image = conversation()
        zoom = _probe_image(ZOOM_VIEW_PX)  # the tool turn's image
        report.local_image_tokens, report.image_size = image.n_tokens, f"{image.width}×{image.height} px"
        report.local_zoom_tokens, report.zoom_size = zoom.n_tokens, f"{zoom.width}×{zoom.height} px"
        training = training_prompt(messages, tools)
        counted: list[int] = []
        try:
            served = server_prompt(engine, messages, tools)
        except TemplateFailure as exc:  # its first turn renders: the image tokens are still measured
            report.template_failure = str(exc)
        else:
            report.method, counted = served.method, served.image_tokens
            report.differences = diff_text(training, served.text)
            report.same = not report.differences
            if training != local:
                report.known = [f"local engine (RL form) vs chat template at byte {d.offset}: local {d.server!r}, "
                                f"template {d.reference!r}" for d in diff_text(training, local)]
        if len(counted) == 2:  # the endpoint expanded both images: its count is exact
            (report.server_image_tokens, report.server_zoom_tokens), report.image_count_from = counted, report.method
        else:
            report.server_image_tokens = server_image_tokens(engine, image)
            report.server_zoom_tokens = server_image_tokens(engine, zoom)
            report.image_count_from = "usage.prompt_tokens with and without the image"
    except Exception as exc:  # report what is known so far; the CLI turns it into an error
        logger.info("server check failed", exc_info=True)
        report.error = f"{type(exc).__name__}: {exc}"
    finally:
        engine.close()
    return report


#: Prompt tokens around an image that are not the image's own: ``<|vision_start|>`` and ``<|vision_end|>``.
IMAGE_WRAPPER_TOKENS = 2


def server_image_tokens(engine: RemoteEngine, image: PreparedImage) -> int | None:
    """Image tokens the server makes of ``image``: the prompt size of a one-token completion of the first turn
    with the image, less that without it, less `IMAGE_WRAPPER_TOKENS` (None: the server reports no prompt size)."""
    task = get_task("cv").text
    with_image = _prompt_tokens(engine, first_turn_messages(image, task))
    without = _prompt_tokens(engine, first_turn_messages(None, task))
    if with_image is None or without is None:
        return None
    return with_image - without - IMAGE_WRAPPER_TOKENS


def _prompt_tokens(engine: RemoteEngine, messages: list[Message]) -> int | None:
    engine.reset()
    engine.extend_messages(messages)
    usage: dict = {}
    engine.client.stream_chat(engine.request_body(1), lambda c: usage.update(c.get("usage") or {}))
    total = usage.get("prompt_tokens")
    return int(total) if total else None
