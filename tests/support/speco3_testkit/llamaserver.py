"""A real llama.cpp ``llama-server`` on loopback with the tiny model, and a fault-injecting proxy in front of it.

The binary is the one ``scripts/build-llama-tools.sh`` builds from the llama.cpp sources vendored in the installed
llama-cpp-python (``SPECO3_LLAMA_SERVER`` names another). `find_llama_server` returns None when there is none;
tests then skip with that reason, which fails CI under strict skips (``scripts/setup.sh --tests`` builds it).
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.metadata
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def find_llama_server() -> Path | None:
    """``$SPECO3_LLAMA_SERVER``, else the build-llama-tools cache for the installed llama-cpp-python version."""
    env = os.environ.get("SPECO3_LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    try:
        version = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return None
    root = Path(os.environ.get("SPECO3_LLAMA_TOOLS") or
                Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "speco3" / "llama-tools" / version)
    exe = root / "bin" / "llama-server"
    return exe if exe.is_file() and os.access(exe, os.X_OK) else None


#: The image token range of the local engine (speco3.engine.llama: every size the HF processor produces), so the
#: server encodes our prepared images at their size instead of resizing them to its own default range.
IMAGE_TOKEN_FLAGS = ("--image-min-tokens", "4", "--image-max-tokens", "16384")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(exe: Path, text: Path, mmproj: Path, *, slots: int = 4, n_ctx_per_slot: int = 4096,
                 threads: int = 2, log: Path | None = None, extra: tuple[str, ...] = (),
                 start_timeout: float = 120.0) -> Iterator[str]:
    """Run llama-server with the GGUF pair on 127.0.0.1 and a free port; yield its base URL; stop it after.

    ``--jinja`` makes it render the chat template embedded in the GGUF (the Spec-o3 template written by our
    converter); ``-np`` gives it ``slots`` parallel sequences with continuous batching.
    """
    port = free_port()
    cmd = [str(exe), "-m", str(text), "--mmproj", str(mmproj), "--host", "127.0.0.1", "--port", str(port),
           "--jinja", "-np", str(slots), "-c", str(slots * n_ctx_per_slot), "-t", str(threads), "-ngl", "0",
           "--no-mmproj-offload", "--no-warmup", "--offline", *IMAGE_TOKEN_FLAGS, *extra]
    out = open(log, "wb") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
    env = {**os.environ, "LLAMA_MEDIA_MARKER": "<__media__>"}
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}" +
                                   (f"; log: {log.read_text(errors='replace')[-3000:]}" if log else ""))
            if healthy(port):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server did not become healthy in {start_timeout:.0f} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is not None:
            out.close()


@pytest.fixture(scope="module")
def tiny_llama_server(tiny_gguf, tmp_path_factory) -> Iterator[str]:
    """Base URL of a llama-server running the tiny Q8_0 pair with 4 slots (one per test module)."""
    exe = find_llama_server()
    if exe is None:
        pytest.skip("llama-server is not built (scripts/build-llama-tools.sh; SPECO3_LLAMA_SERVER names another)")
    text, mmproj = tiny_gguf("Q8_0")
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with llama_server(exe, text, mmproj, slots=4, n_ctx_per_slot=4096, log=log) as url:
        yield url


def healthy(port: int) -> bool:
    """Whether a server on loopback ``port`` answers ``GET /health`` with 200 (llama-server and vLLM both do)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/health")
        ok = conn.getresponse().status == 200
        conn.close()
        return ok
    except OSError:
        return False


class FaultProxy:
    """A small HTTP proxy on loopback that forwards to ``upstream`` and injects faults into chat completions.

    ``plan`` is a list of fault names consumed one per chat-completions request (then requests pass): ``drop``
    (close the connection without an answer), ``500``, ``429`` (with ``Retry-After: 1``), ``truncate`` (forward
    the start of the stream, then close), ``slow`` (wait ``slow_s`` before answering), ``pass``. Every request
    is counted in ``requests``; ``faults`` lists the faults injected; ``heads`` holds each request's header lines
    (what a client sent: the secrets tests read its Authorization).
    """

    def __init__(self, upstream: str, plan: list[str] | None = None, *, slow_s: float = 3.0):
        self.upstream = upstream.split("//", 1)[1]
        self.plan = list(plan or [])
        self.slow_s = slow_s
        self.requests = 0
        self.faults: list[str] = []
        self.heads: list[list[str]] = []
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _next_fault(self, path: str) -> str:
        with self._lock:
            self.requests += 1
            if "chat/completions" not in path or not self.plan:
                return "pass"
            fault = self.plan.pop(0)
            if fault != "pass":
                self.faults.append(fault)
            return fault

    def _serve(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):  # the client gave up (a timed-out request): nothing to answer
            self._handle_one(conn)

    def _handle_one(self, conn: socket.socket) -> None:
        with conn:
            try:
                head, body = _read_request(conn)
            except (OSError, ValueError):
                return
            if head is None:
                return
            method, path = head[0].split(" ")[:2]
            with self._lock:
                self.heads.append(head[1:])
            fault = self._next_fault(path)
            if fault == "drop":
                return
            if fault in ("500", "429"):
                status = "500 Internal Server Error" if fault == "500" else "429 Too Many Requests"
                msg = b'{"error": {"message": "injected fault"}}'
                extra = "Retry-After: 1\r\n" if fault == "429" else ""
                conn.sendall(f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(msg)}\r\n"
                             f"{extra}Connection: close\r\n\r\n".encode() + msg)
                return
            if fault == "slow":
                time.sleep(self.slow_s)
            self._forward(conn, method, path, head[1:], body, truncate=fault == "truncate")

    def _forward(self, conn, method, path, headers, body, truncate: bool) -> None:
        host, port = self.upstream.split(":")
        up = http.client.HTTPConnection(host, int(port), timeout=300)
        hdrs = {k: v for k, v in (h.split(":", 1) for h in headers) if k.lower() not in ("host", "connection")}
        up.request(method, path, body=body, headers={**{k: v.strip() for k, v in hdrs.items()}, "Connection": "close"})
        resp = up.getresponse()
        conn.sendall(f"HTTP/1.1 {resp.status} {resp.reason}\r\n".encode())
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "keep-alive"):
                conn.sendall(f"{k}: {v}\r\n".encode())
        conn.sendall(b"Connection: close\r\n\r\n")
        sent = 0
        while True:
            chunk = resp.read1(4096) if hasattr(resp, "read1") else resp.read(4096)
            if not chunk:
                break
            if truncate and sent + len(chunk) > 600:
                conn.sendall(chunk[: max(0, 600 - sent)])
                break
            conn.sendall(chunk)
            sent += len(chunk)
        up.close()


def _read_request(conn: socket.socket) -> tuple[list[str] | None, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    length = next((int(h.split(":", 1)[1]) for h in lines[1:] if h.lower().startswith("content-length:")), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return lines, body
