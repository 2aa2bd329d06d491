"""Several sampled inspections (rollouts) of one spectrum: the model's own confidence signal.

The model was trained with group-wise sampled rollouts (GRPO, 8 per prompt); K sampled episodes of the same
spectrum and task, each with its own seed, show how settled its verdict is. K=1 at temperature 0 is the paper's
greedy evaluation.

`run_rollouts` is the one entry point for callers (CLI, vetting, evaluate, GUI). On a llama.cpp engine with
``EngineSettings.n_seq`` > 1 the rollouts run at once on parallel sequences that share the evaluated prefix
(`speco3.engine.parallel`; up to ``n_seq`` at a time, the next started as one ends); on other engines one after
another. The result is the same either way: one step list per rollout, rollout i sampled with
``plan.samplings()[i]``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from speco3.agent.driver import drive
from speco3.agent.loop import episode_run
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
    """K rollouts: their count and the sampling shared by all but the seed (rollout i uses ``seed + i``)."""

    k: int = 1
    temperature: float | None = None  # None: 0 (greedy) for K=1, ROLLOUT_TEMPERATURE for K>1
    top_p: float = ROLLOUT_TOP_P
    top_k: int = 0
    seed: int = 0

    def samplings(self) -> list[Sampling]:
        if self.k < 1:
            raise ValueError(f"the number of rollouts must be at least 1, got {self.k}")
        temp = self.temperature if self.temperature is not None else (0.0 if self.k == 1 else ROLLOUT_TEMPERATURE)
        if self.k > 1 and temp <= 0:
            raise ValueError("K > 1 greedy rollouts would all be the same; give a temperature above 0")
        return [Sampling(temp, self.top_p, self.top_k, self.seed + i) for i in range(self.k)]


def iter_rollouts(
    engine: Engine,
    spectrum: Spectrum,
    task: Task | str,
    render: RenderFn,
    plan: RolloutPlan,
    *,
    cancel: threading.Event | None = None,
    on_rollout_token: Callable[[int, str], None] | None = None,
    **episode_kwargs,
) -> Iterator[tuple[int, Step]]:
    """The ``plan.k`` episodes of ``spectrum`` as they happen: ``(rollout i, step)``, each rollout ending with its
    `VerdictStep` (``episode_kwargs`` as for `run_rollouts`). Closing the iterator ends the rollouts in flight.
    ``on_rollout_token(i, text)`` streams every rollout's generated text (the app shows each as it is written)."""
    samplings = plan.samplings()
    episodes = (episode_run(engine, spectrum, task, render, cancel=cancel, sampling=s,
                            **_token_sink(episode_kwargs, on_rollout_token, i))
                for i, s in enumerate(samplings))
    hits0 = _cache_hits(engine)
    slots = open_slots(engine, len(samplings))
    try:
        yield from drive(episodes, slots, width=len(samplings))
    finally:
        slots.close()
    if (hits := _cache_hits(engine) - hits0) > 0:
        logger.info("%d rollouts of %s: %d zoom image(s) asked for again came from the vision-encoder cache",
                    len(samplings), spectrum.name, hits)


def run_rollouts(
    engine: Engine,
    spectrum: Spectrum,
    task: Task | str,
    render: RenderFn,
    plan: RolloutPlan,
    *,
    cancel: threading.Event | None = None,
    on_step: Callable[[int, Step], None] | None = None,
    **episode_kwargs,
) -> list[list[Step]]:
    """Run ``plan.k`` episodes of ``spectrum``; return each rollout's steps (each list ends with a `VerdictStep`).

    Parameters
    ----------
    on_step : callable, optional
        ``on_step(i, step)`` for every step of rollout ``i`` as it happens.
    episode_kwargs
        Passed to `run_episode` (``max_turns``, ``image_max_tokens``, ``max_tokens_per_turn``, ``on_token``).
    """
    results: list[list[Step]] = [[] for _ in range(plan.k)]
    for i, step in iter_rollouts(engine, spectrum, task, render, plan, cancel=cancel, **episode_kwargs):
        results[i].append(step)
        if on_step is not None:
            on_step(i, step)
    assert all(steps and isinstance(steps[-1], VerdictStep) for steps in results)
    return results


def _token_sink(episode_kwargs: dict, on_rollout_token: Callable[[int, str], None] | None, i: int) -> dict:
    """``episode_kwargs`` with rollout ``i``'s own ``on_token`` when every rollout's text is streamed."""
    if on_rollout_token is None:
        return episode_kwargs
    return {**episode_kwargs, "on_token": lambda piece: on_rollout_token(i, piece)}


def _cache_hits(engine: Engine) -> int:
    """Images the engine took from its cache of vision-encoder outputs so far (0 for engines without one)."""
    return int(engine.stats().extra.get("image_cache_hits", 0))


__all__ = ["ROLLOUT_TEMPERATURE", "RolloutPlan", "iter_rollouts", "run_rollouts"]
