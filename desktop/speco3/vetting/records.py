"""Records of the vetting store: what the model said, what the human decided."""

from __future__ import annotations

import getpass
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from speco3 import __version__
from speco3.agent.confidence import Confidence
from speco3.spectra.model import to_frame

DECISIONS = ("YES", "NO", "UNSURE")
VERDICTS = ("YES", "NO")
#: Quality flags offered by the GUI (free-form flags are accepted too).
#: The issue flags a vetter ticks in the app (and ``spec-o3 decide --flag``), with the words reports show for them.
#: A store may hold other flag codes (older versions, hand-made stores): reports show those as written.
FLAG_LABELS: dict[str, str] = {"bad_spectrum": "Bad spectrum", "bad_redshift": "Wrong redshift",
                               "bad_class": "Wrong class", "interesting": "Interesting"}
STANDARD_FLAGS = tuple(FLAG_LABELS)


def flag_words(flags: str | list[str] | None) -> str:
    """Flags as a vetter reads them ("Wrong class, Interesting"), from a list or the exports' comma-joined codes."""
    codes = [f.strip() for f in (flags.split(",") if isinstance(flags, str) else flags or []) if f.strip()]
    return ", ".join(FLAG_LABELS.get(code, code) for code in codes)


def now_iso() -> str:
    """UTC time, ISO 8601 with microseconds (sortable)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


@dataclass
class ModelVerdict:
    """One model run on one spectrum for one task.

    ``verdict`` is YES/NO or None; ``outcome`` is the `speco3.agent.Outcome` value (``YES``, ``NO``,
    ``format_error``, ``budget_exhausted``, ``cancelled``, ``engine_error``, ``context_full``, ``input_error``).
    """

    spectrum_key: str
    task: str
    verdict: str | None
    outcome: str
    model_id: str = "unknown"
    quant: str | None = None
    text_sha256: str | None = None
    mmproj_sha256: str | None = None
    prompt_version: str = ""
    file_sha256: str | None = None
    engine_settings: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    tokens: int = 0
    seconds: float = 0.0
    zooms: int = 0
    detail: str = ""
    answer: str = ""
    trace_dir: str | None = None
    created_at: str = field(default_factory=now_iso)
    app_version: str = __version__
    id: int | None = None
    # the fold of its K rollouts (`speco3.agent.confidence`); None in rows written before rollouts were stored
    rollouts: int | None = None
    p_yes: float | None = None
    p_yes_token: float | None = None
    agreement: float | None = None
    abstained: bool | None = None
    format_failures: int | None = None
    outcomes: list[str] | None = None
    # adaptive rollouts (`speco3.agent.adaptive`): the budget and why no more rollouts ran ("fixed" for a fixed K);
    # None in rows written before they were stored. The rollouts that ran are ``rollouts`` (`k_used`).
    k_max: int | None = None
    stop_reason: str | None = None

    @property
    def k_used(self) -> int | None:
        return self.rollouts

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "k_used": self.k_used}

    def confidence(self) -> Confidence | None:
        """The stored fold as a `Confidence` (None for rows stored without one)."""
        if self.rollouts is None or self.outcomes is None:
            return None
        return Confidence(k=self.rollouts, outcomes=tuple(self.outcomes), yes=self.outcomes.count("YES"),
                          no=self.outcomes.count("NO"), p_yes=self.p_yes, p_yes_token=self.p_yes_token,
                          agreement=self.agreement, verdict=self.verdict, format_failures=self.format_failures or 0,
                          abstained=bool(self.abstained))

    def set_confidence(self, conf: Confidence) -> None:
        """Copy a `speco3.agent.confidence.Confidence` onto the row."""
        self.rollouts, self.p_yes, self.p_yes_token = conf.k, conf.p_yes, conf.p_yes_token
        self.agreement, self.abstained, self.format_failures = conf.agreement, conf.abstained, conf.format_failures
        self.outcomes = list(conf.outcomes)


@dataclass
class RolloutRecord:
    """One rollout of a model run: its outcome, how it sampled, its cost, its trace and the zoom windows it asked
    for (``[lo, hi, label]`` per tool call that ran; ``lo``/``hi`` None when the range was unusable)."""

    idx: int
    outcome: str
    verdict: str | None = None
    p_yes_token: float | None = None
    seed: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    turns: int = 0
    tokens: int = 0
    zooms: int = 0
    seconds: float = 0.0
    detail: str = ""
    answer: str = ""
    trace_dir: str | None = None
    windows: list[list] = field(default_factory=list)
    verdict_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Evidence:
    """A wavelength window the vetter marked as evidence for a decision, in the order marked.

    ``lo`` and ``hi`` are in Å on the spectrum's own wavelength axis (observed frame, as the viewer and the zoom tool
    show it); ``label`` is the vetter's short note on what the window shows ("Hα emission"), possibly empty. The
    training export (`spec-o3 export-training`) turns each window into one zoom turn of a trajectory.
    """

    lo: float
    hi: float
    label: str = ""

    def __post_init__(self):
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"evidence window: '{name}' must be a finite wavelength in Å, got {value!r}")
        if not self.lo < self.hi:
            raise ValueError(f"evidence window: the start ({self.lo:g}) must be below the end ({self.hi:g})")
        if not isinstance(self.label, str):
            raise ValueError(f"evidence window: the label must be text, got {self.label!r}")
        object.__setattr__(self, "lo", float(self.lo))
        object.__setattr__(self, "hi", float(self.hi))
        object.__setattr__(self, "label", " ".join(self.label.split()))

    @classmethod
    def parse(cls, text: str) -> Evidence:
        """``"6500-6600"`` or ``"6500-6600:Hα emission"`` (Å; the label is everything after the first colon)."""
        rng, _, label = text.partition(":")
        lo_text, sep, hi_text = rng.strip().partition("-")
        try:
            if not sep:
                raise ValueError
            lo, hi = float(lo_text), float(hi_text)
        except ValueError:
            raise ValueError(f"evidence window {text!r}: expected START-END[:LABEL] in Å, e.g. 6500-6600:Hα") \
                from None
        return cls(lo, hi, label)

    def to_list(self) -> list:
        """The stored form, ``[lo, hi, label]`` (the rollouts' zoom windows are stored the same way)."""
        return [self.lo, self.hi, self.label]

    @classmethod
    def from_list(cls, item: Sequence) -> Evidence:
        lo, hi, *rest = item
        return cls(lo, hi, rest[0] if rest else "")

    def __str__(self) -> str:
        return f"{self.lo:g}-{self.hi:g}" + (f":{self.label}" if self.label else "")


def parse_evidence_list(text: str) -> list[Evidence]:
    """Comma-separated windows, ``"6540-6590:Hα, 4840-4880:Hβ"`` (`Evidence.parse` each; labels hold no comma)."""
    return [Evidence.parse(part) for part in text.split(",") if part.strip()]


def evidence_text(evidence: Sequence[Evidence]) -> str:
    """The windows as one line, ``"6540-6590:Hα; 4840-4880:Hβ"`` (the exports' ``evidence`` column)."""
    return "; ".join(str(e) for e in evidence)


def model_evidence(rollouts: Sequence[RolloutRecord], z: float) -> list[Evidence]:
    """The zoom windows a model run's rollouts asked for, as evidence windows to start from: in order of the
    rollouts and their tool calls, moved from the rest frame the zoom tool works in to the observed frame evidence is
    kept in (``λ (1 + z)``, ``z`` the catalogue redshift the run used), each range once, unusable ranges left out."""
    out: list[Evidence] = []
    seen: set[tuple[float, float]] = set()
    for r in rollouts:
        for window in r.windows:
            lo, hi, *rest = [*window, None, None][:3]
            if not all(isinstance(v, int | float) and math.isfinite(v) for v in (lo, hi)) or not lo < hi:
                continue
            rng = (round(to_frame(lo, z, "rest", "observed"), 1), round(to_frame(hi, z, "rest", "observed"), 1))
            if rng in seen or not rng[0] < rng[1]:
                continue
            seen.add(rng)
            out.append(Evidence(*rng, str(rest[0] or "")))
    return out


def login_vetter(name: str = "") -> str:
    """The vetter's name: ``name`` when given, else the login name (as the app and ``spec-o3 decide`` store it)."""
    if name.strip():
        return name.strip()
    try:  # LOGNAME, USER, LNAME, USERNAME, then the password database (os.getlogin needs a terminal)
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def evidence_json(evidence: Sequence[Evidence]) -> str:
    return json.dumps([e.to_list() for e in evidence], ensure_ascii=False)


def evidence_from_json(text: str | None) -> list[Evidence]:
    """Stored evidence (JSON list of ``[lo, hi, label]``); NULL (rows written before schema 4) reads as none."""
    return [Evidence.from_list(item) for item in json.loads(text)] if text else []


@dataclass
class Decision:
    """A human decision on one spectrum for one task (the model verdict the vetter saw is kept with it)."""

    spectrum_key: str
    task: str
    decision: str
    flags: list[str] = field(default_factory=list)
    comment: str = ""
    vetter: str = ""
    model_verdict_seen: str | None = None
    model_verdict_id: int | None = None
    decided_at: str = field(default_factory=now_iso)
    app_version: str = __version__
    id: int | None = None
    #: the windows the vetter marked, in order (schema 4; empty in older rows)
    evidence: list[Evidence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": [e.to_list() for e in self.evidence]}


@dataclass
class Annotation:
    """The vetter's current flags and comment on one spectrum for one task, saved as they are edited."""

    spectrum_key: str
    task: str
    flags: list[str] = field(default_factory=list)
    comment: str = ""
    vetter: str = ""
    updated_at: str = field(default_factory=now_iso)
    app_version: str = __version__
    evidence: list[Evidence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": [e.to_list() for e in self.evidence]}


class Notes(NamedTuple):
    """The flags, comment and evidence windows of a spectrum as the vetter last left them (`VettingStore.notes`)."""

    flags: list[str]
    comment: str
    evidence: list[Evidence]


@dataclass
class SpectrumInfo:
    """What exports show about a spectrum besides the verdicts."""

    spectrum_key: str
    name: str = ""
    path: str | None = None
    index: int = 0
    survey: str | None = None
    object_id: str | None = None
    ra: float | None = None
    dec: float | None = None
    redshift: float | None = None
    snr: float | None = None
    file_sha256: str | None = None

    @classmethod
    def of(cls, key: str, spectrum, file_sha256: str | None = None) -> SpectrumInfo:
        m = spectrum.meta
        return cls(key, spectrum.name, m.path, m.index, m.survey, m.object_id, m.ra, m.dec, m.redshift, m.snr,
                   file_sha256)


def spectrum_key(spectrum) -> str:
    """The store key of a spectrum: its address ``PATH#N`` (or its name when it has no path; `Spectrum.address`)."""
    return spectrum.address
