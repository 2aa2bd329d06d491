"""The strict-skip hook (tests/strict_skips.py) in a pytester run: every kind of skip fails under
SPECO3_STRICT_SKIPS=1, opt-in tests may skip until their variable is set, and nothing changes without the flag."""

from __future__ import annotations

import pytest

import strict_skips

pytest_plugins = ["pytester"]

SKIPPING = '''
import os
import pytest

def test_runtime_skip():
    pytest.skip("strace not on PATH")

@pytest.mark.skipif(True, reason="llama-cpp-python is not installed")
def test_skipif():
    pass

@pytest.fixture
def data():
    pytest.skip("spectra not found")

def test_fixture_skip(data):
    pass

def test_importorskip():
    pytest.importorskip("speco3_no_such_module")

@pytest.mark.optin("SPECO3_TEST_OPTIN")
def test_optin():
    if os.environ.get("SPECO3_TEST_OPTIN") != "1":
        pytest.skip("set SPECO3_TEST_OPTIN=1")
    pytest.skip("Xvfb not installed")

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

def test_passes():
    pass
'''


@pytest.fixture
def run(pytester, monkeypatch):
    pytester.makepyfile(test_skipping=SKIPPING)

    def go(strict: bool, optin: bool = False):
        monkeypatch.setenv(strict_skips.ENV, "1" if strict else "0")
        monkeypatch.setenv("SPECO3_TEST_OPTIN", "1" if optin else "0")
        return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rA", plugins=[strict_skips])

    return go


def test_without_the_flag_skips_stay_skips(run):
    result = run(strict=False)
    result.assert_outcomes(passed=1, skipped=5, xfailed=1)


def test_strict_mode_fails_every_skip_but_the_opt_in_one(run):
    result = run(strict=True)
    result.assert_outcomes(passed=1, skipped=1, failed=2, errors=2, xfailed=1)  # setup-phase skips: errors
    out = result.stdout.str()
    for reason in ("strace not on PATH", "llama-cpp-python is not installed", "spectra not found",
                   "speco3_no_such_module"):
        assert reason in out
    assert "SKIPPED [1] test_skipping.py" in out and "set SPECO3_TEST_OPTIN=1" in out
    assert result.ret != 0


def test_an_opt_in_test_must_not_skip_once_enabled(run):
    result = run(strict=True, optin=True)
    result.assert_outcomes(passed=1, failed=3, errors=2, xfailed=1)
    assert "Xvfb not installed" in result.stdout.str()


def test_a_module_skipped_at_collection_is_an_error(pytester, monkeypatch):
    pytester.makepyfile(test_module_skip='import pytest\npytest.importorskip("torch_not_here")\n\n'
                                         'def test_x():\n    pass\n')
    monkeypatch.setenv(strict_skips.ENV, "1")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", plugins=[strict_skips])
    result.assert_outcomes(errors=1)
    assert "torch_not_here" in result.stdout.str() and result.ret != 0
    monkeypatch.setenv(strict_skips.ENV, "0")
    pytester.runpytest_inprocess("-p", "no:cacheprovider", plugins=[strict_skips]).assert_outcomes(skipped=1)
