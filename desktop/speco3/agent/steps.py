"""Step records yielded by the agent loop, and the outcome kinds of an episode.

Every record is plain data: the GUI shows them as they arrive, the CLI prints them, `speco3.agent.trace`
serializes them. Images are `speco3.imaging.PreparedImage` (the bytes the model saw).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from speco3.imaging import PreparedImage
from speco3.spectra.view import View


class Outcome(str, Enum):
    """How an episode ended. ``YES``/``NO`` carry a verdict; the others do not."""

    YES = "YES"
    NO = "NO"
    FORMAT_ERROR = "format_error"  # an output with neither a parsable tool call nor an answer
    BUDGET_EXHAUSTED = "budget_exhausted"  # still calling tools after the last allowed turn
    CANCELLED = "cancelled"
    ENGINE_ERROR = "engine_error"  # the engine (or the model files) failed
    CONTEXT_FULL = "context_full"  # the conversation no longer fits the context window
    INPUT_ERROR = "input_error"  # the spectrum cannot be shown (no usable data, full view not renderable)

    @property
    def verdict(self) -> str | None:
        return self.value if self in (Outcome.YES, Outcome.NO) else None

    @property
    def has_verdict(self) -> bool:
        return self.verdict is not None


@dataclass
class ViewSpec:
    """The serializable part of a `View` (the spectrum itself is referenced by the trace)."""

    wavelength_range: tuple[float, float] | None
    frame: str = "rest"
    title: str | None = None

    @classmethod
    def of(cls, view: View) -> ViewSpec:
        return cls(view.wavelength_range, view.frame, view.title)

    def to_dict(self) -> dict:
        rng = list(self.wavelength_range) if self.wavelength_range is not None else None
        return {"wavelength_range": rng, "frame": self.frame, "title": self.title}

    @classmethod
    def from_dict(cls, d: dict) -> ViewSpec:
        rng = d.get("wavelength_range")
        return cls(tuple(rng) if rng is not None else None, d.get("frame", "rest"), d.get("title"))


@dataclass
class Step:
    """Base of all step records. ``turn`` counts assistant turns (0 = before the first one)."""

    turn: int
    seconds: float = 0.0

    kind = "step"


@dataclass
class PromptStep(Step):
    """The full-spectrum view and the task text the episode starts with."""

    task_id: str = ""
    task_text: str = ""
    view: View | None = None
    view_spec: ViewSpec | None = None
    image: PreparedImage | None = None

    kind = "prompt"


@dataclass
class AssistantStep(Step):
    """One assistant message as generated (verbatim), split into reasoning and the rest."""

    text: str = ""
    reasoning: str = ""
    content: str = ""
    tool_name: str | None = None
    tool_arguments: object = None
    n_tokens: int = 0
    prompt_tokens: int = 0
    image_tokens: int = 0
    stop_reason: str = "stop"
    tokens_per_s: float = 0.0

    kind = "assistant"


@dataclass
class ToolStep(Step):
    """A tool call that ran: what was asked, what the model got back."""

    label: str | None = None
    wavelength_range: tuple | None = None
    ok: bool = False
    error: str | None = None
    response_text: str = ""
    view: View | None = None
    view_spec: ViewSpec | None = None
    image: PreparedImage | None = None

    kind = "tool"


@dataclass
class VerdictStep(Step):
    """The end of an episode (always the last record)."""

    outcome: Outcome = Outcome.FORMAT_ERROR
    verdict: str | None = None
    answer: str = ""  # the final message outside <think>: the answer and its justification
    method: str = "none"
    strict: bool = False
    detail: str = ""
    turns: int = 0
    tokens_generated: int = 0
    prompt_tokens: int = 0
    image_tokens: int = 0
    zooms: int = 0
    p_yes_token: float | None = None  # P(YES)/(P(YES)+P(NO)) at the verdict token (`speco3.agent.confidence`)
    extra: dict = field(default_factory=dict)

    kind = "verdict"


STEP_TYPES: dict[str, type[Step]] = {
    cls.kind: cls for cls in (PromptStep, AssistantStep, ToolStep, VerdictStep)
}
