"""Fast, default: the manual's vLLM command (docs/howto/servers.md) is the one the opt-in vLLM tests run, and the HTTP error vLLM answers
a template failure with (captured from vLLM 0.32, replayed on loopback) reaches `server check` with its status."""

from __future__ import annotations

import http.server
import json
import re
import threading

import pytest

from speco3.engine.chatapi import ChatClient, ServerConfig, ServerError
from speco3_testkit.vllmserver import CHAT_TEMPLATE, REPO, readme_command, serve_command

#: vLLM 0.32's answer to ``POST /tokenize`` of a conversation whose template has no placeholder for the tool
#: turn's image (captured from the opt-in test's server, tests/engine/test_vllm_template.py).
VLLM_TEMPLATE_FAILURE = (500, b'{"error":{"message":"Failed to apply prompt replacement for mm_items[\'image\'][1]",'
                              b'"type":"InternalServerError","param":null,"code":500}}')


def test_the_manual_carries_the_tested_vllm_command():
    page = (REPO / "docs" / "howto" / "servers.md").read_text(encoding="utf-8")
    joined = re.sub(r" *\\\n *", " ", page)  # backslash-continued lines as one
    assert readme_command() in joined, readme_command()
    cmd = serve_command(REPO / ".venv-vllm/bin/python", REPO / "m", 8123)
    assert cmd[cmd.index("--chat-template") + 1] == str(REPO / CHAT_TEMPLATE) and (REPO / CHAT_TEMPLATE).is_file()
    assert "--chat-template" not in serve_command(REPO / "py", REPO / "m", 8123, chat_template=False)


class _Replay(http.server.BaseHTTPRequestHandler):
    answer = VLLM_TEMPLATE_FAILURE
    seen: list[str] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append(self.path)
        status, body = self.answer
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # quiet: no access lines on stderr
        return None


@pytest.mark.parametrize("retries", [0, 2])
def test_vllm_template_failure_keeps_its_status_and_message(retries):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Replay)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _Replay.seen = []
    client = ChatClient(ServerConfig(f"http://127.0.0.1:{httpd.server_port}", retries=retries, backoff_s=0.01))
    try:
        with pytest.raises(ServerError) as got:
            client.post_json("/tokenize", {"messages": []})
    finally:
        client.close()
        httpd.shutdown()
        httpd.server_close()
    assert got.value.status == 500 and len(_Replay.seen) == retries + 1
    assert "HTTP 500: Failed to apply prompt replacement for mm_items['image'][1]" in str(got.value)
    assert ("failed 3 times" in str(got.value)) == (retries == 2)


@pytest.mark.allow_network_loopback
def test_server_check_json_reports_a_failure_too(capsys):
    """Nothing listens on the port: exit 1 with the message on stderr, and with --json the report (its error) on
    stdout, so that a script reading it does not get an empty document."""
    import socket

    from speco3.cli import main

    with socket.socket() as s:  # a loopback port that nothing serves once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["server", "check", "--json", "--retries", "0", f"http://127.0.0.1:{port}"]) == 1
    out = capsys.readouterr()
    report = json.loads(out.out)
    assert "ConnectError" in report["error"] or "refused" in report["error"], report
    assert "server check of" in out.err
