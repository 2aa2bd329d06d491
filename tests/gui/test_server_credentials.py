"""The Settings dialog never writes a model server's password or API key into ``desktop.json``
(docs/threat-model.md): the password goes to the 0600 credentials file and memory, the key stays in its environment
variable, and the app still reaches the server (a real llama-server behind the test kit's recording proxy)."""

from __future__ import annotations

import base64
import json
import logging
import stat

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QLineEdit

from speco3.applog import log_path
from speco3.gui.dialogs import SettingsDialog
from speco3.gui.settings import CREDENTIALS_FILE, AppSettings
from speco3_testkit.llamaserver import FaultProxy

pytestmark = pytest.mark.gui

USER, PASSWORD, KEY = "alice", "Pa55-w0rd-never-kept", "sk-key-never-kept-1234"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


def _auth(proxy: FaultProxy) -> list[str | None]:
    return [next((h.split(":", 1)[1].strip() for h in head if h.lower().startswith("authorization:")), None)
            for head in proxy.heads]


def _connect(settings: AppSettings) -> None:
    """What the app does with the server chosen in Settings: open the remote engine and load it (it asks the
    server for its models)."""
    choice = settings.server_choice()
    assert choice is not None
    engine = choice.open(settings.engine_settings(server=True))
    try:
        engine.load()
        assert engine.info.model_id.endswith(".gguf")
    finally:
        engine.close()


def _no_secret_in(*files) -> None:
    for f in files:
        data = f.read_bytes() if f.is_file() else b""
        assert PASSWORD.encode() not in data and KEY.encode() not in data and f"{USER}:".encode() not in data, f


@pytest.mark.llama
@pytest.mark.allow_network_loopback
def test_settings_keep_no_secret_and_still_reach_the_server(qtbot, tiny_llama_server, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    s = AppSettings()
    with FaultProxy(tiny_llama_server) as proxy:
        dlg = SettingsDialog(s)
        qtbot.addWidget(dlg)
        dlg.server_url.setText(proxy.url.replace("//", f"//{USER}:{PASSWORD}@") + "/v1")
        dlg.accept()
        assert dlg.error.text() == "" and s.server_url == proxy.url + "/v1"
        path = s.save()
        _no_secret_in(path)
        creds = path.with_name(CREDENTIALS_FILE)
        assert stat.S_IMODE(creds.stat().st_mode) == 0o600 and PASSWORD.encode() in creds.read_bytes()
        _connect(s)  # this session: the password from memory
        assert _auth(proxy) and set(_auth(proxy)) == {BASIC}
        again = AppSettings.load()  # the next session: from the credentials file
        assert again.server_url == proxy.url + "/v1" and again.notice == ""
        proxy.heads.clear()
        _connect(again)
        assert _auth(proxy) and set(_auth(proxy)) == {BASIC}
        # an API key: named (its variable) in the settings, never written; sent as the Bearer token
        monkeypatch.setenv("SPECO3_TEST_KEY", KEY)
        dlg = SettingsDialog(again)
        qtbot.addWidget(dlg)
        assert PASSWORD not in dlg.server_url.text() and USER not in dlg.server_url.text()
        dlg.server_key_env.setText("SPECO3_TEST_KEY")
        dlg.accept()
        again.save()
        proxy.heads.clear()
        _connect(again)
        assert _auth(proxy) and set(_auth(proxy)) == {f"Bearer {KEY}"}
    assert json.loads(path.read_text())["server_api_key_env"] == "SPECO3_TEST_KEY"
    _no_secret_in(path, log_path())
    assert PASSWORD not in caplog.text and KEY not in caplog.text


def test_an_old_settings_file_with_a_password_has_it_moved_out_once(qtbot, make_window, caplog):
    caplog.set_level(logging.DEBUG)
    path = AppSettings.path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"vetter": "t", "server_url": f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1"}))
    s = AppSettings.load()
    _no_secret_in(path)
    assert json.loads(path.read_text())["server_url"] == "http://127.0.0.1:9/v1" and s.vetter == "t"
    creds = path.with_name(CREDENTIALS_FILE)
    assert stat.S_IMODE(creds.stat().st_mode) == 0o600 and PASSWORD.encode() in creds.read_bytes()
    assert s.server_config().basic_auth == (USER, PASSWORD) and s.server_url == "http://127.0.0.1:9/v1"
    assert "moved out of desktop.json" in s.notice and PASSWORD not in s.notice
    w = make_window(settings=s)
    assert "moved out of desktop.json" in w.statusBar().currentMessage() and s.notice == ""
    assert AppSettings.load().notice == ""  # told once: the file holds nothing more to move
    assert AppSettings.load().server_config().basic_auth == (USER, PASSWORD)
    _no_secret_in(path, log_path())
    assert PASSWORD not in caplog.text and PASSWORD not in repr(s)


def test_a_password_put_into_the_url_is_never_saved_and_an_unwritable_credentials_file_keeps_it_in_memory(
        tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    s = AppSettings(server_url=f"http://{USER}:{PASSWORD}@127.0.0.1:9")
    assert s.server_url == "http://127.0.0.1:9" and s.server_config().basic_auth == (USER, PASSWORD)
    s.server_url = f"http://{USER}:{PASSWORD}@127.0.0.1:9"  # set around set_server: save still keeps it out
    (tmp_path / CREDENTIALS_FILE).mkdir()  # cannot be written as a file
    s.save(tmp_path / "desktop.json")
    _no_secret_in(tmp_path / "desktop.json")
    assert s.server_config().basic_auth == (USER, PASSWORD) and "kept for this session only" in caplog.text
    assert PASSWORD not in caplog.text


def test_settings_say_a_password_is_kept_for_the_server_and_forget_removes_it(qtbot):
    """Reopening Settings after a ``user:password@`` URL: a line says a user name and password are kept for the
    server (never the password); Forget removes them from the credentials file and the session, and the line goes."""
    s = AppSettings()
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    assert dlg.server_credentials.isHidden()  # none kept: no line
    dlg.server_url.setText(f"http://{USER}:{PASSWORD}@127.0.0.1:9/v1")
    dlg.accept()
    creds = s.save().with_name(CREDENTIALS_FILE)
    assert PASSWORD.encode() in creds.read_bytes()
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    dlg.show()
    dlg.tabs.setCurrentIndex(next(i for i in range(dlg.tabs.count()) if dlg.tabs.tabText(i) == "Model server"))
    assert dlg.server_credentials.isVisible() and CREDENTIALS_FILE in dlg.server_credentials_text.text()
    assert all(PASSWORD not in w.text() for w in dlg.findChildren(QLabel) + dlg.findChildren(QLineEdit))
    qtbot.mouseClick(dlg.forget_credentials, Qt.MouseButton.LeftButton)
    assert not dlg.server_credentials.isVisible() and dlg.error.text() == ""
    assert PASSWORD.encode() not in creds.read_bytes() and f"{USER}".encode() not in creds.read_bytes()
    assert s.server_auth is None and s.server_config().basic_auth is None
    dlg.accept()  # OK after Forget: the URL typed without them does not bring them back
    assert s.server_auth is None and AppSettings.load().server_config().basic_auth is None
    dlg = SettingsDialog(s)
    qtbot.addWidget(dlg)
    assert dlg.server_credentials.isHidden()
