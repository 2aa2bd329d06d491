"""The log file: written by the CLI and the app, rotated, keys redacted, errors with their tracebacks."""

from __future__ import annotations

import logging

import pytest

from speco3 import applog
from speco3.cli import main


@pytest.fixture
def clean_root():
    """Restore the root logger's handlers and level after a test that sets up logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    for h in root.handlers:
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    root.setLevel(level)


def test_log_file_in_the_log_folder_with_a_header(tmp_path, monkeypatch, clean_root):
    monkeypatch.setenv("SPECO3_LOG_DIR", str(tmp_path / "logs"))
    path = applog.setup_logging("spec-o3-test")
    assert path == tmp_path / "logs" / "spec-o3.log" == applog.log_path()
    logging.getLogger("speco3.test").debug("not at INFO")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("speco3.test").exception("it failed")
    applog.file_handler().flush()
    text = path.read_text()
    assert "spec-o3-test 0." in text and "llama-cpp-python" in text and "Python 3." in text
    assert "it failed" in text and "Traceback (most recent call last)" in text and "ValueError: boom" in text
    assert "not at INFO" not in text


def test_keys_never_reach_the_file(tmp_path, monkeypatch, clean_root):
    monkeypatch.setenv("SPECO3_LOG_DIR", str(tmp_path))
    path = applog.setup_logging("t")
    log = logging.getLogger("speco3.test")
    log.info("download with token=%s from %s", "s3cr3tvalue", "repo")
    log.info("header Authorization: Bearer abcdefghijklmnop; hub key hf_AbCdEfGhIjKlMnOp")
    try:
        raise RuntimeError("api_key=zzzzzzzz rejected")
    except RuntimeError:
        log.exception("request failed")
    applog.file_handler().flush()
    text = path.read_text()
    for secret in ("s3cr3tvalue", "abcdefghijklmnop", "hf_AbCdEfGhIjKlMnOp", "zzzzzzzz"):
        assert secret not in text
    assert text.count("[redacted]") >= 4 and "from repo" in text and "Bearer [redacted]" in text


def test_log_rotates(tmp_path, monkeypatch, clean_root):
    monkeypatch.setenv("SPECO3_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(applog, "MAX_BYTES", 4096)
    path = applog.setup_logging("t")
    log = logging.getLogger("speco3.test")
    for i in range(400):
        log.info("record %04d %s", i, "x" * 60)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["spec-o3.log"] + [f"spec-o3.log.{i}" for i in range(1, applog.BACKUPS + 1)]
    assert all(p.stat().st_size <= 4096 + 200 for p in tmp_path.iterdir())
    assert "record 0399" in path.read_text()


def test_unwritable_log_folder_does_not_stop_the_program(tmp_path, monkeypatch, clean_root, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SPECO3_LOG_DIR", str(blocker / "logs"))
    assert applog.setup_logging("spec-o3") is None
    assert "cannot write the log file" in capsys.readouterr().err
    assert applog.file_handler() is None


def test_cli_writes_the_command_and_the_error_with_traceback(tmp_path, monkeypatch, clean_root, capsys):
    monkeypatch.setenv("SPECO3_LOG_DIR", str(tmp_path))
    assert main(["models", "fit", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "error: model 'no-such-model' is not installed (installed: none)"  # one line, no traceback
    text = (tmp_path / "spec-o3.log").read_text()
    assert "command: models fit no-such-model" in text and "command failed" in text and "Traceback" in text
    assert "ModelNotInstalledError: model 'no-such-model'" in text
