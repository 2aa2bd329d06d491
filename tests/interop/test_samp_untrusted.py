"""What a SAMP peer may make the app read (`speco3.interop.fetch`), against a real loopback HTTP server, real files
and a real pyvo hub: only loopback URLs, every redirect hop checked, bodies capped while streaming, and replies
that never tell whether a path exists."""

from __future__ import annotations

import http.server
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

import sampkit
from sampkit import TABLE_LOAD
from speco3.interop import Malformed
from speco3.interop.fetch import (
    FETCH_FAILED,
    REFUSED_FILE,
    REFUSED_URL,
    Refused,
    check_url,
    download,
    local_table,
    too_large,
)
from speco3.interop.messages import parse_incoming

pytestmark = pytest.mark.allow_network_loopback
samp_env, hub, recorder, link = sampkit.samp_env, sampkit.hub, sampkit.recorder, sampkit.link  # fixtures
VOTABLE = (b'<?xml version="1.0"?>\n<VOTABLE version="1.4" xmlns="http://www.ivoa.net/xml/VOTable/v1.3"><RESOURCE>'
           b'<TABLE><FIELD name="obsid" datatype="long"/><DATA><TABLEDATA><TR><TD>1</TD></TR></TABLEDATA></DATA>'
           b'</TABLE></RESOURCE></VOTABLE>\n')
MB = 1024 * 1024


class _Handler(http.server.BaseHTTPRequestHandler):
    """Paths: /t.vot (a table), /to-* (redirects), /loop, /huge (zeros until the client hangs up, no length),
    /lies (declares 10 GB), /gzip (a compressed body)."""

    seen: list[str] = []
    sent: dict[str, int] = {}

    def log_message(self, *args) -> None:
        """Quiet: no line on stderr per request."""

    def _redirect(self, where: str) -> None:
        self.send_response(302)
        self.send_header("Location", where)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - http.server's API
        type(self).seen.append(self.path)
        if self.path == "/t.vot":
            self.send_response(200)
            self.send_header("Content-Length", str(len(VOTABLE)))
            self.end_headers()
            self.wfile.write(VOTABLE)
        elif self.path == "/to-outside":
            self._redirect("http://192.0.2.7/t.vot")
        elif self.path == "/to-name":
            self._redirect("http://localhost.example.org/t.vot")
        elif self.path == "/to-file":
            self._redirect("file:///etc/passwd")
        elif self.path == "/to-inside":
            self._redirect("/t.vot")
        elif self.path == "/loop":
            self._redirect("/loop")
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            chunk, sent = b"\0" * MB, 0
            try:
                while sent < 4096 * MB:
                    self.wfile.write(chunk)
                    sent += len(chunk)
            except OSError:  # the client hung up, as it should
                type(self).sent["hung up"] = sent
            type(self).sent["huge"] = sent
        elif self.path == "/lies":
            self.send_response(200)
            self.send_header("Content-Length", str(10 * 1024 * MB))
            self.end_headers()
            self.wfile.write(VOTABLE)
        elif self.path == "/gzip":
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"\x1f\x8b" + b"\0" * 8)
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()


@pytest.fixture
def web():
    """Base URL of a real HTTP server on 127.0.0.1 (`_Handler`); its handler's ``seen`` lists the paths asked."""
    _Handler.seen, _Handler.sent = [], {}
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


@pytest.mark.parametrize("url,ok", [
    ("file:///tmp/t.vot", True), ("file:/tmp/t.vot", True), ("file://localhost/tmp/t.vot", True),
    ("http://127.0.0.1:9/t.vot", True),
    ("http://127.7.0.1/t", True), ("http://[::1]:8/t", True), ("https://localhost/t", True),
    ("file://otherhost/t.vot", False), ("http://192.0.2.7/t.vot", False), ("http://localhost.example.org/t", False),
    ("http://127.0.0.1.nip.io/t", False), ("ftp://127.0.0.1/t.vot", False), ("http://0.0.0.0/t", False),
    ("data:,hello", False),
])
def test_only_local_files_and_loopback_urls(url, ok):
    if ok:
        check_url(url)
    else:
        with pytest.raises(Refused, match="offline"):
            check_url(url)
    event = parse_incoming(TABLE_LOAD, {"url": url}, "c1")
    assert isinstance(event, Malformed) != ok


def test_download_follows_loopback_redirects_and_refuses_each_bad_hop(web, tmp_path):
    got = download(f"{web}/to-inside", tmp_path)
    assert got.parent == tmp_path and got.read_bytes() == VOTABLE
    assert _Handler.seen == ["/to-inside", "/t.vot"]
    for path, reason in (("/to-outside", REFUSED_URL), ("/to-name", REFUSED_URL), ("/to-file", REFUSED_URL),
                         ("/loop", FETCH_FAILED), ("/gzip", FETCH_FAILED), ("/missing", FETCH_FAILED)):
        with pytest.raises(Refused) as exc:
            download(f"{web}{path}", tmp_path)
        assert str(exc.value) == reason, path
    assert _Handler.seen.count("/loop") == 6  # the first request and 5 redirects, then refused
    assert list(tmp_path.iterdir()) == [got]  # nothing half-written is left


def test_a_body_over_the_cap_fails_fast_in_bounded_memory(web, tmp_path):
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(Refused) as exc:
            download(f"{web}/huge", tmp_path, max_bytes=4 * MB)
        elapsed = time.monotonic() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(exc.value) == too_large(4 * MB)
    assert elapsed < 5.0, elapsed  # stops at the cap, not at the server's 4 GB
    assert peak < 16 * MB, peak
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(Refused, match="larger than"):  # a declared length over the cap: refused before the body
        download(f"{web}/lies", tmp_path, max_bytes=4 * MB)


def _refusal(url: str, max_bytes: int = MB) -> str:
    with pytest.raises(Refused) as exc:
        local_table(url, max_bytes)
    return str(exc.value)


def test_local_files_a_peer_may_name(tmp_path):
    table = tmp_path / "cands.vot"
    table.write_bytes(VOTABLE)
    assert local_table(table.as_uri()) == table.resolve()
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY material")
    disguised = tmp_path / "looks-like.vot"
    disguised.symlink_to(secret)  # a table name pointing at another file
    folder = tmp_path / "folder.vot"
    folder.mkdir()
    fifo = tmp_path / "pipe.vot"
    os.mkfifo(fifo)  # would block a reader forever
    big = tmp_path / "big.vot"
    with open(big, "wb") as f:
        f.truncate(2 * MB)  # sparse: over the 1 MB cap below
    gz = tmp_path / "t.vot.gz"
    gz.write_bytes(b"\x1f\x8b")
    reasons = {p.name: _refusal(p.as_uri()) for p in (tmp_path / "missing.vot", secret, disguised, folder, fifo,
                                                      big, gz, Path("/etc/passwd"))}
    assert set(reasons.values()) == {REFUSED_FILE}, reasons  # one sentence whatever the cause: no existence oracle
    assert "PRIVATE" not in REFUSED_FILE


def test_peer_replies_do_not_tell_what_exists_and_a_good_table_arrives(link, recorder, tmp_path, web):
    link.connect().result(10)
    me = recorder.id_of("Spec-o3 Desktop")
    present = tmp_path / "notes.txt.bak"
    present.write_text("a private note")

    def reason(url: str) -> str:
        reply = recorder.call(me, TABLE_LOAD, {"url": url})
        assert reply["samp.status"] == "samp.error", reply
        return reply["samp.error"]["samp.errortxt"].replace(url[:80], "URL")

    texts = {reason(u) for u in (present.as_uri(), (tmp_path / "absent.bak").as_uri(), tmp_path.as_uri(),
                                 (tmp_path / "absent.vot").as_uri(), "file:///etc/shadow")}
    assert texts == {f"cannot read URL: {REFUSED_FILE}"}, texts
    assert "private note" not in "".join(texts)
    assert "offline" in reason(f"{web}/to-outside") and _Handler.seen[-1] == "/to-outside"

    table = tmp_path / "cands.vot"
    table.write_bytes(VOTABLE)
    for url in (table.as_uri(), f"{web}/to-inside"):
        reply = recorder.call(me, TABLE_LOAD, {"url": url, "name": "cands"})
        assert reply["samp.status"] == "samp.ok", reply
    loaded = [e for e in _wait_loads(link, 2)]
    assert loaded[0].path == str(table.resolve()) and loaded[0].sender_name == "Recorder"
    assert Path(loaded[1].path).parent == link.files.path and Path(loaded[1].path).read_bytes() == VOTABLE


def _wait_loads(link, n: int, timeout: float = 10.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        loads = [e for e in link.events.items if type(e).__name__ == "LoadTable"]
        if len(loads) >= n:
            return loads
        time.sleep(0.02)
    raise AssertionError(f"{n} LoadTable events not seen: {link.events.items}")
