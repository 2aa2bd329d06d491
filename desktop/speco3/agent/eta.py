"""Time to verdict: a live estimate of the time left for an inspection, and for a queue of them.

An assistant turn costs ``image tokens × s/image token + prompt tokens × s/prompt token + generated tokens ×
s/generated token`` (the tool's render between turns adds its own seconds). The three rates start from the loaded
model's measured figures (`Rates.from_stats`: image encode time per image token, prefill and decode speed from
`EngineStats`) and are refined as the inspection runs: after every turn the ratio of the measured to the
predicted time of that turn corrects them (`TimeToVerdict.observe`). A turn to come is predicted from what the
turns so far looked like (its image is like the last zoom, it generates as many tokens as the turns so far on
average, its tool turn prompt is as long as the last one).

How many turns are left is not known until the model answers: ``expected_turns`` (the mean over the episodes
finished so far in this session, `QueueEstimate`; a prior of 3 before any) minus the turns done, at least one
while no verdict has come and at most what the turn budget allows.

A queue (`QueueEstimate`) is calibrated on what a spectrum really costs with the K in use: the measured wall time of
each spectrum screened (all its K rollouts, from its start to its verdict row), not the time of the one rollout
the live estimate follows (with K > 1 that rollout may answer long before the others); measured with another K, it
starts again. The spectrum under way has at least the measured mean per spectrum left, less the time it has run.
Before any spectrum is measured the followed rollout's estimate stands alone (its turn times, measured while the K
rollouts share the engine, already carry the others' work; counting it K times was 13 times too high on the tiny
model at K = 4).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from speco3.agent.steps import AssistantStep, PromptStep, Step, ToolStep, VerdictStep
from speco3.engine.base import EngineStats

PRIOR_TURNS = 3.0  # before any episode has finished: turns an inspection is assumed to take
PRIOR_TOOL_S = 0.3  # render of one zoom before one was measured


@dataclass
class Rates:
    """Seconds per image token (encode), per prompt token (prefill) and per generated token (decode)."""

    image_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0

    @property
    def known(self) -> bool:
        return self.decode_s > 0

    @classmethod
    def from_stats(cls, stats: EngineStats | None) -> Rates:
        """The loaded model's measured rates (zero where nothing was measured yet)."""
        if stats is None:
            return cls()
        img_tokens = stats.image_tokens_encoded
        img_s = float(stats.extra.get("image_seconds", 0.0))
        return cls(image_s=img_s / img_tokens if img_tokens else 0.0,
                   prefill_s=1.0 / stats.prefill_tokens_per_s if stats.prefill_tokens_per_s > 0 else 0.0,
                   decode_s=1.0 / stats.decode_tokens_per_s if stats.decode_tokens_per_s > 0 else 0.0)

    def turn_seconds(self, image_tokens: float, prompt_tokens: float, gen_tokens: float) -> float:
        return image_tokens * self.image_s + prompt_tokens * self.prefill_s + gen_tokens * self.decode_s


@dataclass
class TimeToVerdict:
    """Follows one inspection's steps (`observe`) and estimates the seconds left (`remaining`)."""

    rates: Rates = field(default_factory=Rates)
    expected_turns: float = PRIOR_TURNS
    max_turns: int = 8
    turns: int = 0
    done: bool = False
    correction: float = 1.0  # measured / predicted turn time, smoothed
    gen_tokens: list[int] = field(default_factory=list)
    turn_seconds: list[float] = field(default_factory=list)
    tool_seconds: list[float] = field(default_factory=list)
    next_image_tokens: int = 0  # the image the next turn will encode (full view, then each zoom)
    last_tool_prompt: int = 0
    pending_zoom: bool = False  # the last turn called the tool and its zoom has not run yet
    elapsed_in_turn: float = 0.0
    t_start: float = field(default_factory=time.perf_counter)  # when the inspection (the spectrum) started

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def observe(self, step: Step, stats: EngineStats | None = None) -> None:
        """Take one step of the episode into account; ``stats``: the engine's figures after it (refines the rates)."""
        if stats is not None and isinstance(step, AssistantStep):
            measured = Rates.from_stats(stats)
            if measured.known:
                self.rates = measured
        if isinstance(step, PromptStep):
            self.next_image_tokens = step.image.n_tokens if step.image is not None else 0
        elif isinstance(step, AssistantStep):
            self._observe_turn(step)
        elif isinstance(step, ToolStep):
            self.pending_zoom = False
            self.tool_seconds.append(step.seconds)
            self.next_image_tokens = step.image.n_tokens if step.image is not None else self.next_image_tokens
        elif isinstance(step, VerdictStep):
            self.done = True
        self.elapsed_in_turn = 0.0

    def _observe_turn(self, step: AssistantStep) -> None:
        self.turns = step.turn
        self.pending_zoom = step.tool_name is not None
        self.gen_tokens.append(step.n_tokens)
        self.turn_seconds.append(step.seconds)
        if step.turn > 1:
            self.last_tool_prompt = step.prompt_tokens
        if self.rates.known:
            predicted = self.rates.turn_seconds(step.image_tokens, step.prompt_tokens, step.n_tokens)
            if predicted > 0:
                ratio = step.seconds / predicted
                self.correction = ratio if len(self.turn_seconds) == 1 else 0.5 * self.correction + 0.5 * ratio

    def tick(self, seconds_in_turn: float) -> None:
        """Time spent so far in the turn under way (the live display calls it every tick)."""
        self.elapsed_in_turn = max(0.0, seconds_in_turn)

    def turns_left(self) -> int:
        if self.done:
            return 0
        left = round(self.expected_turns - self.turns)
        return max(1, min(left, self.max_turns - self.turns))

    def tool_turn_seconds(self) -> float:
        """Predicted seconds of one zoom (render and image preparation)."""
        return (sum(self.tool_seconds) / len(self.tool_seconds)) if self.tool_seconds else PRIOR_TOOL_S

    def next_turn_seconds(self) -> float:
        """Predicted seconds of one assistant turn to come (0 when nothing is known yet)."""
        gen = sum(self.gen_tokens) / len(self.gen_tokens) if self.gen_tokens else None
        if self.rates.known:
            if gen is None:  # before the first turn: assume it fills a tenth of the generation budget
                gen = 64
            prompt = self.last_tool_prompt or 40
            t = self.rates.turn_seconds(self.next_image_tokens, prompt, gen) * self.correction
        elif self.turn_seconds:
            t = sum(self.turn_seconds) / len(self.turn_seconds)
        else:
            return 0.0
        return t

    def remaining(self) -> float | None:
        """Seconds left for this inspection (None before anything is known): the turns left, a zoom between
        each two of them, and the zoom the last turn asked for when it has not run yet."""
        if self.done:
            return 0.0
        per = self.next_turn_seconds()
        if per <= 0:
            return None
        left = self.turns_left()
        zooms = left - 1 + int(self.pending_zoom)
        return max(0.0, left * per + zooms * self.tool_turn_seconds() - self.elapsed_in_turn)


@dataclass
class QueueEstimate:
    """Time left for a batch: the spectrum under way plus the spectra still queued, at the measured wall time per
    spectrum (see module doc). ``rollouts``: the K the measurements were made with."""

    episode_seconds: list[float] = field(default_factory=list)
    episode_turns: list[int] = field(default_factory=list)
    rollouts: int = 1

    def finished(self, verdict: VerdictStep, seconds: float | None = None) -> None:
        """A spectrum is done: ``seconds`` its measured wall time, all rollouts (default: ``verdict``'s own)."""
        self.episode_seconds.append(verdict.seconds if seconds is None else seconds)
        self.episode_turns.append(max(1, verdict.turns))

    @property
    def expected_turns(self) -> float:
        """Mean turns of the episodes finished so far (the prior counts as one episode)."""
        return (PRIOR_TURNS + sum(self.episode_turns)) / (1 + len(self.episode_turns))

    def new_episode(self, rates: Rates, max_turns: int = 8) -> TimeToVerdict:
        return TimeToVerdict(rates=rates, expected_turns=self.expected_turns, max_turns=max_turns)

    def per_spectrum(self, current: TimeToVerdict | None = None) -> float | None:
        """Seconds one spectrum takes: the measured mean, else the prior (the followed rollout's estimate of a
        whole episode); None while nothing is known."""
        if self.episode_seconds:
            return sum(self.episode_seconds) / len(self.episode_seconds)
        if current is not None and current.next_turn_seconds() > 0:
            return current.expected_turns * current.next_turn_seconds()
        return None

    def remaining(self, current: TimeToVerdict | None, queued: int, parallel: int = 1) -> float | None:
        """Seconds left for the current spectrum and ``queued`` more, run ``parallel`` at a time (the mean time per
        spectrum was then measured with as many in flight); None while nothing was measured."""
        per = self.per_spectrum(current)
        if per is None:
            return None
        now = 0.0
        if current is not None:
            followed = current.remaining() or 0.0
            now = followed if current.done or not self.episode_seconds else max(followed, per - current.elapsed())
        return now + queued * per / max(1, parallel)


def format_eta(seconds: float | None) -> str:
    """``about 40 s left``, ``about 3 min left``, ``estimating …``."""
    if seconds is None:
        return "estimating time left …"
    if seconds < 90:
        return f"about {max(1, round(seconds))} s left"
    if seconds < 5400:
        return f"about {round(seconds / 60)} min left"
    return f"about {seconds / 3600:.1f} h left"
