"""Desktop settings persisted as JSON in ``config_dir()/desktop.json`` (no Qt).

Engine settings (threads, GPU layers, context, image token cap) are kept here and turned into
`speco3.engine.base.EngineSettings` when a model is opened; the keymap stores only the user's overrides.
A corrupt or hand-broken file never stops the app: it is moved aside and the defaults are used.

No secret is kept in ``desktop.json``: a model server's user name and password (``http://user:pw@host``) are taken
out of the URL and kept in memory for the session and in ``config_dir()/server-credentials.json`` (mode 0600, one
entry per server URL); an API key is only ever named (the environment variable holding it) or read from the OS
keyring. A ``desktop.json`` of an older version holding them has them moved out when it is read (`AppSettings.load`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from speco3.agent.adaptive import DEFAULT_K_MAX
from speco3.agent.confidence import DEFAULT_MIN_AGREEMENT, DEFAULT_MIN_ANSWERED, Thresholds
from speco3.agent.rollouts import ROLLOUT_TEMPERATURE, RolloutPlan
from speco3.agent.settings import RolloutSettings, RunSettings
from speco3.agent.tasks import Task, run_adapters
from speco3.config import config_dir, data_dir
from speco3.engine.base import DEFAULT_N_CTX, EngineSettings, KvType
from speco3.engine.choice import DEMO, InstalledModel, ModelChoice, ModelServer
from speco3.fileio import write_text_atomic
from speco3.netaddr import split_credentials
from speco3.vetting.records import SETTINGS_FILE, vetter_name
from speco3.vetting.stopping import DEFAULT_CONFIDENCE, DEFAULT_RECALL, check_target

log = logging.getLogger(__name__)

FILE_NAME = SETTINGS_FILE  # its "vetter" is also read by `spec-o3 decide` (`speco3.vetting.records.vetter_name`)
#: The model servers' user names and passwords, by URL (0600), beside ``desktop.json``: never in it.
CREDENTIALS_FILE = "server-credentials.json"


def _credentials_path(settings_path: Path) -> Path:
    return settings_path.with_name(CREDENTIALS_FILE)


def _read_credentials(path: Path) -> dict[str, tuple[str, str]]:
    """The stored (user, password) of each server URL; {} when the file is missing, unreadable or of another shape
    (never an error, never its content in a message)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(url): (str(v[0]), str(v[1])) for url, v in raw.items()
            if isinstance(v, list) and len(v) == 2 and all(isinstance(x, str) for x in v)}


def _write_credentials(path: Path, url: str, creds: tuple[str, str] | None) -> bool:
    """Store (``creds``) or forget (None) the server ``url``'s user and password in ``path`` (0600, atomically).
    False when it cannot be written (they are then kept for this session only)."""
    known = _read_credentials(path)
    if known.get(url) == creds or (creds is None and url not in known):
        return True
    if creds is None:
        del known[url]
    else:
        known[url] = creds
    try:
        write_text_atomic(path, json.dumps({u: list(c) for u, c in known.items()}, indent=1), mode=0o600)
        return True
    except OSError as exc:
        log.warning("the model server's user name and password cannot be saved in %s (%s); they are kept for this "
                    "session only", path, exc.strerror or type(exc).__name__)
        return False


def _target_ok(recall: float, confidence: float) -> bool:
    try:
        check_target(recall, confidence)
    except ValueError:
        return False
    return True


@dataclass
class AppSettings:
    """User settings of the desktop app.

    Attributes
    ----------
    vetter : str
        Name or initials recorded with every decision.
    data_folder : str
        Where models, the demo archive and vetting stores live ("" = the platform data folder).
    n_threads, n_gpu_layers, n_ctx, image_max_tokens :
        Engine settings (None = automatic).
    parallel : int
        Conversations a local model decodes together (``EngineSettings.n_seq``): the K rollouts of a spectrum, or
        the spectra of a batch pre-screen screened at once; 1: one at a time.
    model_id : str
        Installed model to run ("" = the first installed one); read and written as a typed choice by
        `remembered_model` and `remember_model`.
    model_source : str
        Where the model chosen last comes from: "" = an installed model (``model_id``), ``"server"`` = the model
        server (``server_url``), ``"demo"`` = the scripted demo session (on the demo archive). The model box keeps
        the user's choice when a server is added in Settings, and a restart chooses it again.
    lora : str
        The adapter the user chose in the model box, as ``--lora`` takes it: "" = none chosen (the task's own
        adapter, its file's ``lora``, when it has one, else the model alone — as the command line without
        ``--lora``); ``"none"`` (`speco3.agent.tasks.NO_LORA`) = the base model alone, a task's adapter off (the
        "base only" entry); ``FILE[:SCALE]`` = that adapter (the store's adapters made for the model,
        `speco3.gui.agent_control.installed_models`). `speco3.agent.tasks.run_adapters` resolves it, as for
        the command line.
    task : str
        Task the agent panel and line markers start with.
    keymap : dict
        Action name → key sequence, only the user's overrides of `speco3.gui.keymap.DEFAULT_KEYS`.
    auto_advance : bool
        Go to the next spectrum after a decision.
    last_archive : str
        Archive folder opened last (reopened at start).
    archive_stores : dict
        Archive folder → the vetting store chosen for it (``--store``, File → Open store…, a night's ``spec-o3
        vet`` store found beside it and accepted); "" = the app's own store, chosen (a store found beside the
        archive is then not offered again). An archive not listed is vetted in the app's own store.
    samp_enabled : bool
        Connect to a SAMP hub (TOPCAT, SPLAT-VO, Aladin) at start; off by default (no socket is opened then).
    samp_match_arcsec : int
        Tolerance for selecting the archive spectrum nearest a position sent over SAMP.
    samp_table_peers : dict
        SAMP application name → whether a table it sends may replace the vetting queue without asking (the
        user's remembered answers, `speco3.interop.consent.QueueConsent`); other applications are asked.
    samp_max_table_mb : int
        The largest table a SAMP peer may make the app read or download (`speco3.interop.fetch`).
    rollouts : int
        Sampled agent runs per spectrum (K); 1 is the paper's greedy run. K > 1 gives ``p_yes``, agreement and
        abstention (`speco3.agent.confidence`) for the confidence column and the triage orders.
    rollouts_auto : bool
        ``--rollouts auto``: run the rollouts in rounds (2 first, then more only while the decision is not settled;
        `speco3.agent.adaptive`) up to ``max_rollouts``, instead of a fixed ``rollouts``.
    max_rollouts : int
        The budget of ``rollouts_auto`` (default 8, the training group size).
    rollout_temperature : float
        Sampling temperature of the rollouts when K > 1 or auto.
    min_agreement, min_answered : float
        Abstention thresholds (`speco3.agent.confidence.Thresholds`).
    server_url, server_model, server_api_key_env : str
        "Model server": run the model on this OpenAI-compatible server instead of locally ("" = local model);
        the served model's name ("" = the first it lists) and the environment variable holding its API key ("" =
        the OS keyring entry, when keyring is installed). The key itself is never stored here.
    stop_recall, stop_confidence : float
        "Stop vetting at recall … confidence …": the target of the queue's stopping line and of File → Audit the rest
        (`speco3.vetting.stopping`) until an audit sample has recorded its own (a sample keeps the target it was
        drawn for); recall in (0, 1], confidence in (0, 1).
    """

    vetter: str = ""
    data_folder: str = ""
    n_threads: int | None = None
    n_gpu_layers: int | None = None
    n_ctx: int = DEFAULT_N_CTX
    image_max_tokens: int | None = None
    kv_type: KvType = "f16"
    parallel: int = EngineSettings.n_seq
    model_id: str = ""
    model_source: str = ""
    lora: str = ""
    task: str = "cv"
    keymap: dict[str, str] = field(default_factory=dict)
    auto_advance: bool = True
    last_archive: str = ""
    archive_stores: dict[str, str] = field(default_factory=dict)
    samp_enabled: bool = False
    samp_match_arcsec: int = 5
    samp_table_peers: dict[str, bool] = field(default_factory=dict)
    samp_max_table_mb: int = 64
    rollouts: int = 1
    rollouts_auto: bool = False
    max_rollouts: int = DEFAULT_K_MAX
    rollout_temperature: float = ROLLOUT_TEMPERATURE
    min_agreement: float = DEFAULT_MIN_AGREEMENT
    min_answered: float = DEFAULT_MIN_ANSWERED
    server_url: str = ""
    server_model: str = ""
    server_api_key_env: str = ""
    stop_recall: float = DEFAULT_RECALL
    stop_confidence: float = DEFAULT_CONFIDENCE

    def __post_init__(self) -> None:
        #: (user, password) of ``server_url``, in memory only (see module doc); never in `save`'s file or a repr
        self.server_auth: tuple[str, str] | None = None
        #: what `load` did that the user should hear of once (credentials moved out of the file), else ""
        self.notice = ""
        self._take_credentials()

    def _take_credentials(self) -> bool:
        """Move a ``user:password@`` of ``server_url`` into `server_auth`; whether there was one."""
        url, creds = split_credentials(self.server_url.strip())
        if creds is None:
            return False
        self.server_url, self.server_auth = url, creds
        return True

    def set_server(self, url: str, credentials: Path | None = None) -> None:
        """Take the server URL as typed: a ``user:password@`` in it goes to `server_auth` and the credentials file
        (``credentials``: default beside the settings file), the URL without it to ``server_url``; a URL typed
        without them keeps those remembered for it."""
        clean, creds = split_credentials(url.strip())
        path = credentials or _credentials_path(self.path())
        if creds is not None:
            _write_credentials(path, clean, creds)
        elif clean != self.server_url or self.server_auth is None:
            creds = _read_credentials(path).get(clean)
        else:
            creds = self.server_auth
        self.server_url, self.server_auth = clean, creds

    def forget_server_credentials(self, credentials: Path | None = None) -> bool:
        """Forget the user name and password kept for ``server_url``: from this session (`server_auth`) and from the
        credentials file (``credentials``: default beside the settings file). False when the file still holds them
        (it cannot be rewritten: the warning is logged)."""
        self.server_auth = None
        return _write_credentials(credentials or _credentials_path(self.path()), self.server_url, None)

    # -- persistence ---------------------------------------------------------------------------------------------
    @staticmethod
    def path() -> Path:
        return config_dir() / FILE_NAME

    @classmethod
    def load(cls, path: Path | None = None) -> AppSettings:
        """Read the settings file; defaults when it is missing, invalid JSON or of the wrong shape."""
        path = path or cls.path()
        if not path.is_file():
            return cls()
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict):
                raise ValueError("top level is not an object")
            out = cls.from_dict(raw)
        except (OSError, ValueError) as exc:
            backup = path.with_name(path.name + ".bad")
            log.warning("settings file %s unreadable (%s); using defaults, old file kept as %s", path, exc, backup)
            with contextlib.suppress(OSError):
                path.replace(backup)
            return cls()
        creds_path = _credentials_path(path)
        if out._take_credentials():  # a file of an older version kept them: moved out, the file rewritten
            kept = _write_credentials(creds_path, out.server_url, out.server_auth)
            try:
                out.save(path)
            except OSError as exc:
                log.warning("settings file %s cannot be rewritten without the server's password (%s)", path,
                            exc.strerror or type(exc).__name__)
            out.notice = (f"The model server's user name and password were moved out of {path.name} into "
                          f"{creds_path if kept else 'memory (for this session)'}; the settings file no longer "
                          "holds them.")
            log.warning("%s", out.notice)
        elif out.server_url:
            out.server_auth = _read_credentials(creds_path).get(out.server_url)
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> AppSettings:
        """Build settings from a dict, ignoring unknown keys and values of the wrong type."""
        out = cls()
        for f in fields(cls):
            if f.name not in raw:
                continue
            value = raw[f.name]
            default = getattr(out, f.name)
            if f.name == "keymap":
                if isinstance(value, dict):
                    out.keymap = {str(k): str(v) for k, v in value.items()}
                continue
            if f.name == "archive_stores":
                if isinstance(value, dict):
                    out.archive_stores = {str(k): v for k, v in value.items() if isinstance(v, str)}
                continue
            if f.name == "samp_table_peers":
                if isinstance(value, dict):
                    out.samp_table_peers = {str(k): v for k, v in value.items() if isinstance(v, bool)}
                continue
            if f.name == "kv_type":
                ok = value in ("f16", "f32", "q8_0")
            elif f.name in ("stop_recall", "stop_confidence"):
                ok = isinstance(value, int | float) and not isinstance(value, bool) and _target_ok(
                    value if f.name == "stop_recall" else DEFAULT_RECALL,
                    value if f.name == "stop_confidence" else DEFAULT_CONFIDENCE)
            elif f.name in ("n_threads", "n_gpu_layers", "image_max_tokens"):
                ok = value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= -1)
            elif isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= (
                    1 if f.name.startswith("min_") else 5)
            elif isinstance(default, int):
                ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
            else:
                ok = isinstance(value, str)
            if ok:
                setattr(out, f.name, value)
            else:
                log.warning("ignoring setting %s=%r (wrong type)", f.name, value)
        return out

    def save(self, path: Path | None = None) -> Path:
        """Write the settings atomically (temp file + rename); a password put into ``server_url`` goes to the
        credentials file instead (`set_server`), never into this one."""
        path = path or self.path()
        if self._take_credentials() and self.server_auth is not None:
            _write_credentials(_credentials_path(path), self.server_url, self.server_auth)
        return write_text_atomic(path, json.dumps(asdict(self), indent=2, sort_keys=True))

    # -- derived -------------------------------------------------------------------------------------------------
    def resolved_data_folder(self) -> Path:
        return Path(self.data_folder).expanduser() if self.data_folder else data_dir()

    def run_settings(self, task: Task | None = None, *, server: bool = False) -> RunSettings:
        """The one settings object of a model run of ``task`` (`speco3.agent.settings.RunSettings`, as the command
        line builds it): the user's engine choices (other fields keep the engine defaults), the adapters
        (`run_adapters`: the chosen one, else the task's own; ``server``: the Model server runs it, which takes
        none) and rollouts (the rollout temperature counts for K > 1 and auto; K = 1 is the greedy run; auto: up
        to ``max_rollouts``). A bad adapter choice raises `Speco3Error`."""
        engine = EngineSettings(n_ctx=self.n_ctx, n_threads=self.n_threads, n_gpu_layers=self.n_gpu_layers,
                                image_max_tokens=self.image_max_tokens, kv_type=self.kv_type, n_seq=self.parallel,
                                lora=run_adapters([self.lora], task, server=server))
        k = self.max_rollouts if self.rollouts_auto else self.rollouts
        rollouts = RolloutSettings(k, self.rollout_temperature if k > 1 or self.rollouts_auto else None,
                                   min_agreement=self.min_agreement, min_answered=self.min_answered,
                                   auto=self.rollouts_auto)
        return RunSettings.of(engine, rollouts)

    def engine_settings(self, task: Task | None = None, *, server: bool = False) -> EngineSettings:
        return self.run_settings(task, server=server).engine

    def rollout_plan(self) -> RolloutPlan | None:
        """K sampled rollouts per spectrum (auto: an adaptive plan), or None for the single greedy run."""
        return self.run_settings().plan()

    def thresholds(self) -> Thresholds:
        return self.run_settings().thresholds()
    def server_config(self):
        """The model server's `ServerConfig`, or None to run the model locally (raises `EngineError` on a bad URL)."""
        if not self.server_url.strip():
            return None
        from speco3.engine.chatapi import ServerConfig

        cfg = ServerConfig(self.server_url.strip(), model=self.server_model.strip() or None,
                           api_key_env=self.server_api_key_env.strip() or None)
        if cfg.basic_auth is None and self.server_auth is not None:
            cfg.basic_auth = self.server_auth
        return cfg

    def server_choice(self) -> ModelServer | None:
        """The model server as a model choice (`speco3.engine.choice.ModelServer`), or None when none is set
        (raises `EngineError` on a bad URL)."""
        cfg = self.server_config()
        return None if cfg is None else ModelServer.of(cfg)

    def remembered_model(self, server: ModelServer | None = None, demo: bool = False) -> ModelChoice | None:
        """The model chosen last (``model_source``, ``model_id``): the scripted demo (`DEMO`) when ``demo`` (the
        demo archive offers it), the model server ``server`` (`server_choice`) when one is set, else the installed
        model ``model_id``; None: none remembered (the box's first entry)."""
        if self.model_source == "demo" and demo:
            return DEMO
        if self.model_source == "server" and server is not None:
            return server
        return InstalledModel(self.model_id) if self.model_id else None

    def remember_model(self, choice: ModelChoice | None) -> None:
        """Remember ``choice`` for the next start (`remembered_model`): an installed model by name, the model server
        (whichever is set then) or the scripted demo; None forgets. The installed model chosen before a server or
        the demo stays remembered for when they are not offered."""
        if isinstance(choice, InstalledModel):
            self.model_id, self.model_source = choice.name or "", ""
        elif isinstance(choice, ModelServer):
            self.model_source = "server"
        elif choice == DEMO:
            self.model_source = "demo"
        else:  # none, or a choice the box never offers (a script file, a file pair)
            self.model_id, self.model_source = "", ""

    def vetter_name(self) -> str:
        """The vetter's name (`speco3.vetting.records.vetter_name`: this setting, else the login name)."""
        return vetter_name(self.vetter, configured="")
