"""The one typed settings object of a model run: the engine's settings and how the rollouts sample and fold.

Built from the command line (`speco3.cli.options.run_settings`) and from the app's settings file
(`speco3.gui.settings.AppSettings.run_settings`); `RunSettings.plan` is the one place a `RolloutPlan` is made
from user options, so the same K samples the same in ``vet``, ``inspect``, ``evaluate`` and the app: rollout i at
the given temperature (the training temperature `ROLLOUT_TEMPERATURE` by default for K > 1), top-p, top-k 0 and
seed ``seed + i``; K = 1 with no sampling options is the engine's own greedy run (no plan). ``auto``
(``--rollouts auto``): K is the budget of an adaptive plan (`RolloutPlan.auto`, `speco3.agent.adaptive`), which
runs 2 rollouts first and more only while the decision is not settled.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from speco3.agent.adaptive import DEFAULT_K_MIN, AdaptiveRule
from speco3.agent.confidence import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_ANSWERED, Thresholds
from speco3.agent.rollouts import ROLLOUT_TOP_P, RolloutPlan
from speco3.engine.base import EngineSettings

#: Alternatives recorded per generated token when K > 1 (for the probability on YES at the verdict token).
DEFAULT_TOP_LOGPROBS = 5


@dataclass(frozen=True)
class RolloutSettings:
    """K sampled rollouts per spectrum and when their fold abstains (``auto``: up to K, as the adaptive rule asks)."""

    k: int = 1
    temperature: float | None = None  # None: 0 for K = 1, ROLLOUT_TEMPERATURE for K > 1
    top_p: float = ROLLOUT_TOP_P
    seed: int = 0
    min_agreement: float = DEFAULT_MIN_AGREEMENT
    min_answered: float = DEFAULT_MIN_ANSWERED
    auto: bool = False  # --rollouts auto: k is the budget k_max (--max-rollouts)

    def plan(self) -> RolloutPlan | None:
        """The rollout plan (None: the engine's own greedy run, K = 1 with no sampling options). Raises
        ValueError for K < 1 or K > 1 at temperature 0."""
        if self.k < 1:
            raise ValueError(f"the number of rollouts must be at least 1, got {self.k}")
        if self.auto:
            rule = AdaptiveRule(k_min=min(DEFAULT_K_MIN, self.k), k_max=self.k)
            plan = RolloutPlan.auto(rule, self.temperature, self.top_p, 0, self.seed)
            return replace(plan, temperature=plan.samplings()[0].temperature)
        if self.k == 1 and self.temperature is None and self.seed == 0 and self.top_p == ROLLOUT_TOP_P:
            return None
        plan = RolloutPlan(self.k, self.temperature, self.top_p, 0, self.seed)
        temperature = plan.samplings()[0].temperature  # checks K and the temperature
        return replace(plan, temperature=temperature)  # the temperature it samples at, recorded with the rows

    def thresholds(self) -> Thresholds:
        return Thresholds(self.min_agreement, self.min_answered)

    def top_logprobs(self, asked: int | None = None) -> int:
        """Alternatives the engine records per token: ``asked``, else `DEFAULT_TOP_LOGPROBS` for K > 1, else 0."""
        if asked is not None:
            if asked < 0:
                raise ValueError(f"top_logprobs must be 0 or more, got {asked}")
            return asked
        return DEFAULT_TOP_LOGPROBS if self.k > 1 or self.auto else 0


@dataclass(frozen=True)
class RunSettings:
    """The engine's settings and the rollouts' (see module doc)."""

    engine: EngineSettings = field(default_factory=EngineSettings)
    rollouts: RolloutSettings = field(default_factory=RolloutSettings)

    @classmethod
    def of(cls, engine: EngineSettings, rollouts: RolloutSettings, top_logprobs: int | None = None) -> RunSettings:
        """``engine`` with the log-probabilities the rollouts need (``top_logprobs``: an explicit choice)."""
        return cls(replace(engine, top_logprobs=rollouts.top_logprobs(top_logprobs)), rollouts)

    def plan(self) -> RolloutPlan | None:
        return self.rollouts.plan()

    def thresholds(self) -> Thresholds:
        return self.rollouts.thresholds()


__all__ = ["DEFAULT_TOP_LOGPROBS", "RolloutSettings", "RunSettings"]
