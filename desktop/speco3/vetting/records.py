"""Records of the vetting store: what the model said, what the human decided."""

from __future__ import annotations

import getpass
import json
import math
import os
import platform
import re
import unicodedata
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from speco3 import __version__
from speco3.agent.confidence import Confidence
from speco3.agent.tasks import Line
from speco3.config import config_dir
from speco3.errors import StoreError
from speco3.spectra.model import pipeline_fit, to_frame
from speco3_base.process import process_gone

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

    ``verdict`` is YES/NO or None (with K rollouts: the majority, also when the model abstains on it); ``outcome``
    is what the run came to (`speco3.agent.confidence.run_outcome`): ``YES``, ``NO``, one rollout's
    `speco3.agent.Outcome` value (``format_error``, ``budget_exhausted``, ``cancelled``, ``engine_error``,
    ``context_full``, ``input_error``), or for K > 1 ``tie``, ``no_answer``, ``abstained``; ``reason`` says why in
    words and ``headline`` is what every surface shows.
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

    @property
    def reason(self) -> str:
        """Why the run gives no verdict to act on (`speco3.agent.confidence.run_reason`; "" for a verdict, a single
        run and rows stored without the fold)."""
        conf = self.confidence()
        return conf.reason if conf is not None else ""

    @property
    def headline(self) -> str:
        """The outcome with its reason: ``YES``, ``format_error``, ``tie: 1 YES / 1 NO`` (`describe_run` of the
        stored fold; the stored outcome for rows without one)."""
        conf = self.confidence()
        return conf.headline if conf is not None else self.outcome

    @property
    def suggestion(self) -> str | None:
        """The verdict a vetter may accept: YES or NO, None when the model abstained or gave none."""
        return None if self.abstained else self.verdict

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "k_used": self.k_used, "reason": self.reason}

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


_GREEK = {"α": "alpha", "β": "beta", "γ": "gamma", "δ": "delta", "ε": "epsilon"}
#: Slack around a window for a named line (air and vacuum wavelengths differ by about 0.03 %).
_LINE_SLACK = 5e-4


def _tokens(text: str) -> list[str]:
    """Lower-case alphanumeric runs, Greek letters spelled out and subscripts made plain ("C₂" → "c2")."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.findall(r"[a-z0-9]+", "".join(_GREEK.get(c, c) for c in text))


def _names(label: str, name: str) -> bool:
    """Whether ``label`` names the line ``name``: its designation ("He II 4686", "Hα") or its designation without
    the wavelength ("He II"), as consecutive words of the label, spaces aside ("Halpha", "H alpha", "[OIII]")."""
    words = _tokens(label)
    runs = {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    full = _tokens(name)
    bare = [t for t in full if not t.isdigit()] or full
    return "".join(full) in runs or "".join(bare) in runs


def label_warnings(evidence: Sequence[Evidence], lines: Sequence[Line], z: float | None) -> list[str]:
    """Evidence windows whose label names a line of the task's list (``lines``: `speco3.agent.tasks.Line`, rest
    vacuum Å) that lies outside the window at redshift ``z``: windows are kept in the observed frame, so a window
    given at the rest wavelength of a line of a spectrum at z > 0 misses it. A label naming a line designation
    without its wavelength ("He I") warns when none of the lines so named lies in the window."""
    if z is None or not math.isfinite(z):
        return []
    out = []
    for w in evidence:
        named = [line for line in lines if w.label and _names(w.label, line.name)]
        observed = [to_frame(line.wavelength, z, "rest", "observed") for line in named]
        if named and not any(w.lo - _LINE_SLACK * o <= o <= w.hi + _LINE_SLACK * o for o in observed):
            where = ", ".join(f"{line.name} at {o:.0f} Å" for line, o in zip(named, observed, strict=True))
            out.append(f"evidence window {w}: the label names {where} (observed frame at z = {z:g}), outside the "
                       f"window {w.lo:g}-{w.hi:g} Å; evidence windows are in the observed frame (rest λ × (1 + z))")
    return out


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


#: The settings file of the desktop app in the config folder; its ``vetter`` is the one name of the person at this
#: account, read by the app and by ``spec-o3 decide`` (`vetter_name`).
SETTINGS_FILE = "desktop.json"


def configured_vetter(path: Path | None = None) -> str:
    """The vetter name set in the app's Settings (``vetter`` of `SETTINGS_FILE`; "" when unset or unreadable)."""
    path = path or config_dir() / SETTINGS_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):  # the app moves a broken file aside; here it only means no name is set
        return ""
    name = raw.get("vetter") if isinstance(raw, dict) else None
    return " ".join(name.split()) if isinstance(name, str) else ""


def vetter_name(name: str = "", configured: str | None = None) -> str:
    """Who decides: ``name`` when given, else the configured name (`configured_vetter`, or ``configured``), else
    the login name — the same person under the same name in the app and on the command line."""
    for candidate in (name, configured_vetter() if configured is None else configured):
        if candidate.strip():
            return " ".join(candidate.split())
    return login_vetter()


def vetter_key(name: str) -> str:
    """One person's key for counting vetters: case and spaces aside ("Ana  Lopez" and "ana lopez" are one)."""
    return " ".join(name.split()).casefold()


def login_vetter(name: str = "") -> str:
    """The vetter's name: ``name`` when given, else the login name."""
    if name.strip():
        return name.strip()
    try:  # LOGNAME, USER, LNAME, USERNAME, then the password database (os.getlogin needs a terminal)
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"


def evidence_json(evidence: Sequence[Evidence]) -> str:
    return json.dumps([e.to_list() for e in evidence], ensure_ascii=False)


def stored_json(text: str | None, default: object, where: str) -> object:
    """A JSON column as stored (``default`` for NULL or ''); damaged JSON, or a value of another JSON type than
    ``default``'s (when that is a list or an object), raises `StoreError` naming ``where`` (store, table, row and
    column), so that a command says it in one line instead of a traceback."""
    if not text:
        return default
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser recurses
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise StoreError(f"{where}: damaged store: not valid JSON ({why})") from exc
    if isinstance(default, list | dict) and not isinstance(value, type(default)):
        raise StoreError(f"{where}: damaged store: expected a JSON {'list' if isinstance(default, list) else 'object'},"
                         f" got {type(value).__name__}")
    return value


def evidence_from_json(text: str | None, where: str = "evidence") -> list[Evidence]:
    """Stored evidence (JSON list of ``[lo, hi, label]``); NULL (rows written before schema 4) reads as none."""
    items = stored_json(text, [], where)
    try:
        out = [Evidence.from_list(item) for item in (items if isinstance(items, list) else [])]  # (a list: see stored_json)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{where}: damaged store: not a list of [lo, hi, label] windows ({exc})") from exc
    return out


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
    #: the vetter's own redshift, its confidence (0-4, as Marz's QOP and SDSS's z_conf_person) and class/subclass
    #: (table decision_fit, created on open; None when not given)
    vetter_z: float | None = None
    z_conf: int | None = None
    vetter_class: str | None = None
    vetter_subclass: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": [e.to_list() for e in self.evidence]}

    def fit_problem(self) -> str | None:
        """What is wrong with the vetter's z, confidence or class (None: nothing)."""
        z, conf = self.vetter_z, self.z_conf
        if z is not None and not (math.isfinite(z) and -0.1 <= z <= 15):
            return f"redshift {z!r} is not a redshift (-0.1 to 15)"
        if conf is not None and (isinstance(conf, bool) or not isinstance(conf, int) or not 0 <= conf <= 4):
            return f"redshift confidence must be 0-4, got {conf!r}"
        if conf is not None and z is None:
            return f"a redshift confidence ({conf}) needs the redshift it is about: give your z too"
        for what, v in (("class", self.vetter_class), ("subclass", self.vetter_subclass)):
            if v is not None and (not v.strip() or len(v) > 40 or not v.isprintable()):
                return f"{what} must be 1-40 printable characters, got {v!r}"
        return None


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
    # the pipeline's view (table spectrum_pipeline): class, subclass and its fit (`speco3.spectra.model.PipelineFit`)
    cls: str | None = None
    subclass: str | None = None
    z_err: float | None = None
    zwarn: int | None = None
    zwarn_name: str | None = None
    deltachi2: float | None = None
    survey_snr: float | None = None
    survey_snr_name: str | None = None

    @classmethod
    def of(cls, key: str, spectrum, file_sha256: str | None = None) -> SpectrumInfo:
        m = spectrum.meta
        fit = pipeline_fit(m)
        survey_snr = m.extra.get("survey_snr")
        return cls(key, spectrum.name, m.path, m.index, m.survey, m.object_id, m.ra, m.dec, m.redshift, m.snr,
                   file_sha256, m.cls, m.subclass, fit.z_err, fit.zwarn, fit.zwarn_name, fit.deltachi2,
                   float(survey_snr) if survey_snr is not None else None, m.extra.get("survey_snr_name"))


@dataclass(frozen=True)
class Work:
    """What a claim covers besides the spectrum: one task screened with one model, prompt version and number of
    rollouts (the done rule's terms, `speco3.vetting.screening.DoneCheck`)."""

    task: str
    model_id: str
    prompt_version: str
    rollouts: int = 1


@dataclass(frozen=True)
class ClaimHolder:
    """Who holds a claim on a spectrum: a screening run (``run_id``, new per run) in process ``pid`` on ``host``."""

    run_id: str
    host: str
    pid: int

    @classmethod
    def here(cls) -> ClaimHolder:
        """A new run of this process."""
        return cls(uuid.uuid4().hex, platform.node(), os.getpid())

    def gone(self) -> bool:
        """True when the holder ran on this host and its process is no more (killed, crashed; a zombie waiting to
        be reaped counts as gone). A holder on another host is never known to be gone: its lease decides."""
        return self.host == platform.node() and process_gone(self.pid)

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"


def spectrum_key(spectrum) -> str:
    """The store key of a spectrum: its address ``PATH#N`` (or its name when it has no path; `Spectrum.address`)."""
    return spectrum.address
