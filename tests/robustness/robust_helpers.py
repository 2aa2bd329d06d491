"""Helpers shared by the robustness tests (imported by name: this folder is on sys.path)."""

from __future__ import annotations

from pathlib import Path

SUITE_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"


def have_llama() -> bool:
    """True when llama-cpp-python with mtmd imports (its shared library loads)."""
    try:
        import llama_cpp.mtmd_cpp  # noqa: F401
    except ImportError:  # not installed: a skip (a failure under SPECO3_STRICT_SKIPS=1); a broken library raises
        return False
    return True


def suite_network_attempts(pytestconfig) -> list[str]:
    """``NETWORK_ATTEMPTS`` of the suite-wide guard in ``tests/conftest.py`` (found among pytest's plugins)."""
    for plugin in pytestconfig.pluginmanager.get_plugins():
        path = getattr(plugin, "__file__", None)
        if path and Path(path).resolve() == SUITE_CONFTEST:
            return plugin.NETWORK_ATTEMPTS
    raise LookupError("tests/conftest.py is not loaded")
