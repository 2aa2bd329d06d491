"""Several sampled inspections (rollouts) of one spectrum: the model's own confidence signal.

The model was trained with group-wise sampled rollouts (GRPO, 8 per prompt); K sampled episodes of the same
spectrum and task, each with its own seed, show how settled its verdict is. K=1 at temperature 0 is the paper's
greedy evaluation.

`iter_rollouts` is the one loop (the screening core iterates it; `run_group` runs it to the end). How the
episodes run (cancel, token stream, turn budget, caps) is one `speco3.agent.loop.EpisodeOptions`. On a llama.cpp engine with ``EngineSettings.n_seq`` > 1 the rollouts run at once on parallel sequences that share the evaluated prefix
(`speco3.engine.parallel`; up to ``n_seq`` at a time, the next started as one ends); on other engines one after
another. The result is the same either way: one step list per rollout, rollout i sampled with
``plan.samplings()[i]``.

``RolloutPlan.auto(rule)`` (``--rollouts auto``) runs the rollouts in rounds (`speco3.agent.adaptive`): ``k_min``
first, then ``step`` more at a time while the rule says the decision is not settled, up to ``k_max``. Every round
runs on the same slots (one `SequencePool` for the whole group), so the later rounds copy the prefix the first one
evaluated (the system prompt, task and full view are evaluated once per spectrum); a stop closes the slots, which
frees every sequence the group held. Rollout i of an adaptive group is rollout i of the fixed group of ``k_max``
(same seed), so an adaptive run is a prefix of the fixed one. `run_group` returns the steps with ``k_max`` and the
stop reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from speco3.agent.adaptive import STOP_CANCELLED, STOP_FIXED, AdaptiveRule, next_round
from speco3.agent.confidence import Thresholds
from speco3.agent.driver import drive
from speco3.agent.loop import EpisodeOptions, episode_steps
from speco3.agent.steps import Step, VerdictStep
from speco3.agent.tasks import Task
from speco3.agent.tool import RenderFn
from speco3.engine.base import Engine, Sampling
from speco3.engine.parallel import open_slots
from speco3.spectra.model import Spectrum

logger = logging.getLogger(__name__)

#: Sampling defaults of a rollout group (K > 1): the temperature the model was trained to sample at with GRPO.
ROLLOUT_TEMPERATURE = 1.0
ROLLOUT_TOP_P = 1.0


@dataclass(frozen=True)
class RolloutPlan:
    """K rollouts: their count and the sampling shared by all but the seed (rollout i uses ``seed + i``).

    With ``adaptive`` (`auto`), ``k`` is the budget ``adaptive.k_max`` and the rule decides how many of them run."""

    k: int = 1
    temperature: float | None = None  # None: 0 (greedy) for K=1, ROLLOUT_TEMPERATURE for K>1 or adaptive
    top_p: float = ROLLOUT_TOP_P
    top_k: int = 0
    seed: int = 0
    adaptive: AdaptiveRule | None = None

    def __post_init__(self):
        if self.adaptive is not None and self.k != self.adaptive.k_max:
            raise ValueError(f"an adaptive plan's k ({self.k}) is its budget k_max ({self.adaptive.k_max})")

    @classmethod
    def auto(cls, rule: AdaptiveRule | None = None, temperature: float | None = None, top_p: float = ROLLOUT_TOP_P,
             top_k: int = 0, seed: int = 0) -> RolloutPlan:
        """``--rollouts auto``: up to ``rule.k_max`` rollouts, as many as `speco3.agent.adaptive` asks for."""
        rule = rule or AdaptiveRule()
        return cls(rule.k_max, temperature, top_p, top_k, seed, rule)

    @property
    def first_round(self) -> int:
        """The rollouts that start together: all K of a fixed plan, ``k_min`` of an adaptive one."""
        return self.k if self.adaptive is None else self.adaptive.k_min

    def samplings(self) -> list[Sampling]:
        if self.k < 1:
            raise ValueError(f"the number of rollouts must be at least 1, got {self.k}")
        greedy = self.k == 1 and self.adaptive is None  # an adaptive plan samples, whatever its budget
        temp = self.temperature if self.temperature is not None else (0.0 if greedy else ROLLOUT_TEMPERATURE)
        if (self.k > 1 or self.adaptive is not None) and temp <= 0:
            raise ValueError("K > 1 greedy rollouts would all be the same; give a temperature above 0")
        return [Sampling(temp, self.top_p, self.top_k, self.seed + i) for i in range(self.k)]


@dataclass
class RolloutGroup:
    """The rollouts that ran (``steps[i]`` of rollout i) out of a budget of ``k_max``, and why no more ran: the
    adaptive rule's stop (`speco3.agent.adaptive`), ``fixed`` for a fixed-K plan, ``cancelled``."""

    steps: list[list[Step]]
    k_max: int
    stop_reason: str
    rounds: int = 0  # rounds that ran (1 for a fixed K; each adds rollouts the rule asked for)

    @property
    def k_used(self) -> int:
        return len(self.steps)


def iter_rollouts(
    engine: Engine,
    spectrum: Spectrum,
    task: Task | str,
    render: RenderFn,
    plan: RolloutPlan,
    options: EpisodeOptions = EpisodeOptions(),
    *,
    thresholds: Thresholds | None = None,
    group: RolloutGroup | None = None,
    on_rollout_token: Callable[[int, str], None] | None = None,
) -> Iterator[tuple[int, Step]]:
    """The episodes of ``spectrum`` as they happen: ``(rollout i, step)``, each rollout ending with its
    `VerdictStep` (``options``: `EpisodeOptions`, each rollout with its own sampling). Closing the iterator ends
    the rollouts in flight.

    A fixed plan runs one round of ``plan.k``; an adaptive one (`RolloutPlan.auto`) ``k_min``, then ``step`` more
    while its rule (judged with ``thresholds``) says the decision is not settled, up to ``k_max``, all on the same
    slots (closed at the stop, which frees every sequence the group held). ``group``, when given, receives the
    steps, the budget and the stop reason as the rounds go (`RolloutGroup`). ``on_rollout_token(i, text)`` streams
    every rollout's generated text (the app shows each as it is written)."""
    samplings = plan.samplings()
    rule = plan.adaptive
    group = group if group is not None else RolloutGroup([], len(samplings), STOP_FIXED)
    group.steps.clear()
    group.k_max, group.stop_reason, group.rounds = len(samplings), STOP_FIXED, 0
    results = group.steps
    hits0 = _cache_hits(engine)
    width = len(samplings) if rule is None else max(rule.k_min, rule.step)
    slots = open_slots(engine, width)
    try:
        want = plan.first_round
        while want:
            first = len(results)
            batch = samplings[first:first + want]
            group.rounds += 1
            results.extend([] for _ in batch)
            episodes = (episode_steps(engine, spectrum, task, render,
                                      _token_sink(options, on_rollout_token, first + j), sampling=s)
                        for j, s in enumerate(batch))
            for j, step in drive(episodes, slots, width=len(batch)):
                results[first + j].append(step)
                yield first + j, step
            assert all(steps and isinstance(steps[-1], VerdictStep) for steps in results)
            if options.cancelled():
                group.stop_reason = STOP_CANCELLED
                break
            if rule is None:
                break
            verdicts = [steps[-1] for steps in results if isinstance(steps[-1], VerdictStep)]
            decided = next_round([f.outcome.value for f in verdicts], [f.p_yes_token for f in verdicts], rule,
                                 thresholds)
            group.stop_reason, want = decided.stop_reason, decided.add
            logger.info("%s: %d of %d rollouts, %s (chance the rest changes the decision %.3f)", spectrum.name,
                        decided.k, rule.k_max, decided.stop_reason or f"{want} more", decided.p_change)
    finally:
        slots.close()
    if (hits := _cache_hits(engine) - hits0) > 0:
        logger.info("%d rollouts of %s: %d zoom image(s) asked for again came from the vision-encoder cache",
                    len(results), spectrum.name, hits)


def run_group(
    engine: Engine,
    spectrum: Spectrum,
    task: Task | str,
    render: RenderFn,
    plan: RolloutPlan,
    options: EpisodeOptions = EpisodeOptions(),
    *,
    thresholds: Thresholds | None = None,
    on_step: Callable[[int, Step], None] | None = None,
) -> RolloutGroup:
    """Run ``plan``'s episodes of ``spectrum`` to the end (`iter_rollouts`); return the steps of each rollout that
    ran (``.steps``, each ending with its `VerdictStep`), the budget and the stop reason.

    Parameters
    ----------
    options : EpisodeOptions
        Cancel, token stream (``on_token``: every rollout's text into one sink), turn budget and caps.
    on_step : callable, optional
        ``on_step(i, step)`` for every step of rollout ``i`` as it happens.
    """
    group = RolloutGroup([], plan.k, STOP_FIXED)
    for i, step in iter_rollouts(engine, spectrum, task, render, plan, options, thresholds=thresholds, group=group):
        if on_step is not None:
            on_step(i, step)
    return group


def _token_sink(options: EpisodeOptions, on_rollout_token: Callable[[int, str], None] | None,
                i: int) -> EpisodeOptions:
    """``options`` with rollout ``i``'s own ``on_token`` when every rollout's text is streamed."""
    if on_rollout_token is None:
        return options
    return replace(options, on_token=lambda piece: on_rollout_token(i, piece))


def _cache_hits(engine: Engine) -> int:
    """Images the engine took from its cache of vision-encoder outputs so far (0 for engines without one)."""
    return int(engine.stats().extra.get("image_cache_hits", 0))


__all__ = ["ROLLOUT_TEMPERATURE", "RolloutGroup", "RolloutPlan", "iter_rollouts", "run_group"]
