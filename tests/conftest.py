"""Suite-wide fixtures: sockets blocked, user folders in tmp, Qt offscreen, test data (tests/data), strict skips."""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

REPO = Path(__file__).resolve().parents[1]


# -- hang watchdog ----------------------------------------------------------------------------------------------
# pytest-timeout (``timeout_method = "thread"`` in pyproject) dumps the stacks and exits when a test overruns, but it
# needs the GIL. A native deadlock that holds the GIL (a Qt destructor waiting on a lock, say) defeats it, so every
# test is also guarded by faulthandler's C-level watchdog: it needs no GIL, dumps every thread's stack and exits.
WATCHDOG_S = float(os.environ.get("SPECO3_TEST_WATCHDOG_S", "420"))
_watchdog_file = None


def _real_stderr(config):
    """A file on the terminal's stderr: pytest has already redirected fd 2 into its capture when conftests load,
    and a dump written there would vanish with the process. Its fd capture keeps a copy of the real one."""
    capman = config.pluginmanager.getplugin("capturemanager")
    err = getattr(getattr(capman, "_global_capturing", None), "err", None)
    fd = getattr(err, "targetfd_save", None)
    return open(os.dup(fd), "w", closefd=True) if isinstance(fd, int) else sys.__stderr__  # noqa: SIM115


def pytest_configure(config):
    global _watchdog_file
    _watchdog_file = _real_stderr(config)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if _watchdog_file is not None:
        faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=_watchdog_file)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


class NetworkBlocked(RuntimeError):
    """Raised when a test tries to open a network connection."""


_LOOPBACK = {"127.0.0.1", "::1", "localhost"}
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo
NETWORK_ATTEMPTS: list[str] = []


def _is_local(address) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0] if isinstance(address, tuple) else address
    return str(host) in _LOOPBACK or str(host).startswith("127.")


def _guarded_connect(self, address):
    if self.family == socket.AF_UNIX or _is_local(address):
        return _real_connect(self, address)
    NETWORK_ATTEMPTS.append(repr(address))
    raise NetworkBlocked(f"network access blocked in tests: connect to {address!r}")


def _guarded_connect_ex(self, address):
    if self.family == socket.AF_UNIX or _is_local(address):
        return _real_connect_ex(self, address)
    NETWORK_ATTEMPTS.append(repr(address))
    raise NetworkBlocked(f"network access blocked in tests: connect to {address!r}")


def _guarded_getaddrinfo(host, *args, **kwargs):
    if host is None or _is_local(host):
        return _real_getaddrinfo(host, *args, **kwargs)
    NETWORK_ATTEMPTS.append(f"getaddrinfo({host!r})")
    raise NetworkBlocked(f"network access blocked in tests: name lookup of {host!r}")


socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
socket.getaddrinfo = _guarded_getaddrinfo


@pytest.fixture(autouse=True)
def _user_dirs(tmp_path_factory, monkeypatch):
    """Every test gets its own data, config, cache and log folders."""
    base = tmp_path_factory.mktemp("user")
    for name in ("DATA", "CONFIG", "CACHE", "LOG"):
        monkeypatch.setenv(f"SPECO3_{name}_DIR", str(base / name.lower()))
    yield


# --- Test data and strict skips (issue 11.2) -------------------------------------------------------------------
# The real spectra, reference renders and protocol fixtures live in tests/data (tests/testdata.py names the
# folders; origin, licence and sha256 of each file: tests/data/README.md). strict_skips turns every skip into a
# failure under SPECO3_STRICT_SKIPS=1 (scripts/test.sh) unless the test is marked @pytest.mark.optin("ENV_VAR").
from speco3_testkit.testdata import PROTOCOL, SPECTRA  # noqa: E402

pytest_plugins = ["strict_skips", "speco3_testkit.llamaserver"]  # the latter: the tiny_llama_server fixture


@pytest.fixture(scope="session")
def spectra_dir() -> Path:
    """The real spectra (``tests/data/spectra``)."""
    return SPECTRA


@pytest.fixture(scope="session")
def protocol_dir() -> Path:
    """The byte-exact protocol strings (``tests/data/protocol``)."""
    return PROTOCOL


# ---------------------------------------------------------------------------------------- shared tiny model
# One converted tiny Qwen2.5-VL pair per quantization, built once and kept in pytest's cache folder
# (``.pytest_cache/d/speco3-tiny-gguf``; ``SPECO3_TEST_CACHE`` overrides) under a name made from a digest of the
# converter's and the model builder's source: a changed converter or builder makes a new pair, an unchanged one
# is reused by every fixture of this run and of later runs.


@pytest.fixture(scope="session")
def tiny_cache_dir(request, tmp_path_factory) -> Path:
    """Folder of the shared tiny pairs (a fresh temporary one when pytest's cache is switched off)."""
    if os.environ.get("SPECO3_TEST_CACHE"):
        return Path(os.environ["SPECO3_TEST_CACHE"])
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("speco3-tiny-gguf")) if cache is not None else tmp_path_factory.mktemp("tiny-gguf")


@pytest.fixture(scope="session")
def tiny_gguf(tiny_cache_dir):
    """``tiny_gguf(quant="Q8_0", vocab="tiny") -> (text_gguf, mmproj_gguf)``: the shared tiny pair at ``quant``.

    ``quant`` is one of ``F32``, ``F16``, ``Q8_0``, ``Q4_K_M`` (the quantized ones need llama-cpp-python);
    ``vocab="qwen25"``: the tiny model with Qwen2.5-VL's real vocabulary (`speco3_testkit.qwenvocab`).
    Every returned pair passed `speco3_models.gguf_check.check_pair`.
    """
    from speco3_testkit.tinymodel import tiny_gguf_pair

    cache = tiny_cache_dir

    def get(quant: str = "Q8_0", vocab: str = "tiny") -> tuple[Path, Path]:
        return tiny_gguf_pair(cache, quant, vocab)

    return get
