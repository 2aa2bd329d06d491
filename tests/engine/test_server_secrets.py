"""Credentials in a ``--server`` URL: used for the request as the user meant (basic auth; the Bearer key when one is
set), and never logged, stored, traced or shown. A real recording HTTP server on loopback, and ``vet`` against
the real llama-server through the test kit's proxy."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import threading

import pytest

from speco3.engine.chatapi import ChatClient, ServerConfig, ServerError
from speco3.errors import EngineError

PASSWORD = "Pa55-w0rd-never-kept"
USER = "alice"
URL = f"http://{USER}:{PASSWORD}@127.0.0.1:{{port}}/v1"


class _Recorder(http.server.BaseHTTPRequestHandler):
    """Answers 401 to everything and records each request's Authorization header."""

    auth: list[str | None] = []

    def log_message(self, *args) -> None:
        """Quiet: no line on stderr per request."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's API
        type(self).auth.append(self.headers.get("Authorization"))
        body = json.dumps({"error": {"message": f"denied for {self.headers.get('Authorization')}"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def recording_server():
    _Recorder.auth = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_port
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_credentials_are_taken_out_of_the_url():
    cfg = ServerConfig(f"http://{USER}:p%40ss@127.0.0.1:8080/v1/")
    assert cfg.url == "http://127.0.0.1:8080" and cfg.host == "127.0.0.1:8080"
    assert cfg.basic_auth == (USER, "p@ss")  # percent-escapes decoded, as curl does
    assert "p%40ss" not in repr(cfg) and "p@ss" not in repr(cfg) and "basic_auth" not in cfg.to_dict()
    with pytest.raises(EngineError) as exc:
        ServerConfig(f"htp://{USER}:{PASSWORD}@host")
    assert PASSWORD not in str(exc.value) and "***@host" in str(exc.value)


@pytest.mark.allow_network_loopback
def test_basic_auth_from_the_url_and_the_bearer_key_when_set(recording_server, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    client = ChatClient(ServerConfig(URL.format(port=recording_server), retries=0))
    with pytest.raises(ServerError) as exc:
        client.get_json("/v1/models")
    client.close()
    assert _Recorder.auth == ["Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()]
    assert PASSWORD not in str(exc.value) and f"127.0.0.1:{recording_server}" in str(exc.value)

    monkeypatch.setenv("SPECO3_TEST_KEY", "sk-test-key-1234")
    client = ChatClient(ServerConfig(URL.format(port=recording_server), api_key_env="SPECO3_TEST_KEY", retries=0))
    with pytest.raises(ServerError):
        client.get_json("/v1/models")
    client.close()
    assert _Recorder.auth[-1] == "Bearer sk-test-key-1234"  # the key is still sent (the URL's user no longer wins)
    assert "not sent (an API key is set" in caplog.text
    assert PASSWORD not in caplog.text


@pytest.mark.allow_network_loopback
def test_cli_with_a_password_in_the_url_logs_and_prints_it_nowhere(recording_server, capsys):
    """``server check`` against a server that refuses: the request carried the credentials, the error names the
    server without them, and the log file (which records the command line) has them blanked."""
    from speco3.applog import log_path
    from speco3.cli import main

    url = URL.format(port=recording_server)
    assert main(["server", "check", "--retries", "0", "--json", url]) == 1
    printed = capsys.readouterr()
    assert _Recorder.auth and set(_Recorder.auth) == {
        "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
    assert f"127.0.0.1:{recording_server}" in printed.err and PASSWORD not in printed.out + printed.err
    logged = log_path().read_text(encoding="utf-8")
    assert f"http://[redacted]@127.0.0.1:{recording_server}" in logged and PASSWORD not in logged


@pytest.mark.parametrize("url,warned", [("http://10.1.2.3:8080", True), ("http://gpu-box:8080", True),
                                        ("https://gpu-box:8080", False), ("http://127.0.0.1:8080", False),
                                        ("http://localhost:8080", False)])
def test_a_secret_over_plain_http_to_another_host_is_warned_about(url, warned, monkeypatch, caplog):
    """No request is made: the warning comes when the client is set up."""
    monkeypatch.setenv("SPECO3_TEST_KEY", "sk-test-key-1234")
    caplog.set_level(logging.WARNING, logger="speco3.engine.chatapi")
    ChatClient(ServerConfig(url, api_key_env="SPECO3_TEST_KEY")).close()
    assert ("travels unencrypted" in caplog.text) == warned
    caplog.clear()
    ChatClient(ServerConfig(url.replace("//", f"//{USER}:{PASSWORD}@"))).close()
    assert ("password travels unencrypted" in caplog.text) == warned
    assert PASSWORD not in caplog.text
    caplog.clear()
    monkeypatch.delenv("SPECO3_TEST_KEY")
    ChatClient(ServerConfig(url)).close()  # nothing secret: nothing to warn about
    assert "unencrypted" not in caplog.text


@pytest.mark.llama
def test_vet_with_a_password_in_the_server_url_keeps_it_nowhere(tiny_llama_server, tmp_path, capsys):
    """The real llama-server behind the kit's recording proxy: every request carried the basic-auth header; the
    store, its traces, the log file and the output hold the URL without the password."""
    from speco3.applog import log_path
    from speco3.cli import main
    from speco3.vetting import VettingStore
    from speco3_testkit.llamaserver import FaultProxy
    from speco3_testkit.spectra import pillow_render, write_csv_archive

    arch = write_csv_archive(tmp_path / "arch", 2)
    db = tmp_path / "r.sqlite"
    with FaultProxy(tiny_llama_server) as proxy:
        url = proxy.url.replace("//", f"//{USER}:{PASSWORD}@")
        rc = main(["vet", str(arch), "--task", "cv", "--out", str(db), "--server", url, "--max-tokens-per-turn",
                   "16", "--max-turns", "2"], render=pillow_render)
        heads = list(proxy.heads)
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    basic = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    auth = [next((h.split(":", 1)[1].strip() for h in head if h.lower().startswith("authorization:")), None)
            for head in heads]
    assert heads and set(auth) == {basic}, auth
    with VettingStore(db, readonly=True) as store:
        rows = store.model_verdicts("cv", latest=False)
    assert len(rows) == 2 and {r.engine_settings["server"] for r in rows} == {proxy.url}
    kept = [*tmp_path.rglob("*"), log_path()]  # the store (and its journal), the traces beside it, the log
    leaks = [str(p) for p in kept if p.is_file() and PASSWORD.encode() in p.read_bytes()]
    assert leaks == [] and PASSWORD not in printed.out + printed.err
    assert log_path().is_file() and "[redacted]@127.0.0.1" in log_path().read_text(errors="replace")
