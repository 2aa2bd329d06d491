"""Strict skips: under ``SPECO3_STRICT_SKIPS=1`` (set by ``scripts/test.sh``, hence by CI) a skipped test fails.

A skip caused by a missing dependency, a missing tool (Xvfb, strace) or missing data means the suite did not run
what it claims to run, so in strict mode it is reported as a failure with the original reason. Only an opt-in test
may skip: one marked ``@pytest.mark.optin("ENV_VAR")`` may skip while ``ENV_VAR`` is not ``1`` (the bundle build
under ``SPECO3_BUILD_BUNDLE``, the one-node Slurm cluster of ``tests/vetting/test_slurm.py`` under
``SPECO3_SLURM``, the vLLM tests under ``SPECO3_VLLM``, the clean-Debian check under ``SPECO3_FRESH_SYSTEM``, the
engine on a Vulkan device, ``tests/engine/test_vulkan.py``, under ``SPECO3_VULKAN`` with ``.venv-vulkan``'s python,
the bundle with dynamically loaded backends, ``tests/engine/test_dl_bundle.py``, under ``SPECO3_DL_BUNDLE`` with
``.venv-bundle``'s python, the Linux packages on bare Debian roots, ``tests/packaging/test_bare_roots.py``, under
``SPECO3_PACKAGES``); once the variable is ``1`` its skips fail as well. A module that skips while being
collected (a module-level ``importorskip``) becomes a collection error. ``xfail`` results are left alone.

Loaded from ``tests/conftest.py`` (``pytest_plugins``); ``tests/test_strict_skips.py`` runs it under pytester.
"""

from __future__ import annotations

import os

import pytest

ENV = "SPECO3_STRICT_SKIPS"


def strict() -> bool:
    return os.environ.get(ENV) == "1"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "optin(env): an opt-in test; it may skip while the environment variable env is not 1, even "
                   f"under {ENV}=1")


def optin_allows_skip(item) -> bool:
    """True when the test carries an ``optin`` marker whose environment variable is not ``1``."""
    for mark in item.iter_markers("optin"):
        env = mark.args[0] if mark.args else mark.kwargs["env"]
        if os.environ.get(env) != "1":
            return True
    return False


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2])
    return str(longrepr)


def _fail(report, what: str) -> None:
    report.outcome = "failed"
    report.longrepr = (f"{what} skipped under {ENV}=1, where only opt-in tests (@pytest.mark.optin) may skip: "
                       f"{_reason(report)}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail") and strict() and not optin_allows_skip(item):
        _fail(report, f"{item.nodeid} ({report.when})")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and strict():
        _fail(report, f"collecting {collector.nodeid}")
