"""Offline guarantee: the app's flows make no network call; only the model download code imports network libraries.

Dynamic part: every flow (``info``, ``index``, ``render``, ``inspect`` scripted and on the tiny llama.cpp model,
``vet``, ``export``, ``models list`` and the desktop app's scripted session) runs in a child process with a
``sitecustomize`` that makes any non-loopback ``connect``/``sendto``/name lookup fatal (logged, exit 97), and, where
``strace`` works, under ``strace`` watching the connect/sendto/sendmsg system calls of every thread and child, so
that native code (Qt, llama.cpp) is covered too. ``HF_HUB_OFFLINE`` is removed from the children's environment:
nothing may depend on it. Static part: network imports, jinja2 sandboxing of model templates, the HTML report's
image sources and the GUI's rendering of model text.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from robust_helpers import have_llama, suite_network_attempts

REPO = Path(__file__).resolve().parents[2]
LAMOST = "lamost/spec-60591-LN042429N340750BM01_sp01-001.fits.gz"
NETWORK_MODULES = ("huggingface_hub", "requests", "httpx", "urllib.request", "socket", "http.client", "urllib3",
                   "aiohttp", "ftplib", "smtplib", "websocket", "websockets", "xmlrpc.client", "http.server")
DOWNLOAD_MODULE = "models/speco3_models/pull.py"
#: The one other module that may: the model-server client, used only with a server the user configured (--server
#: URL, Settings → Model server), and which contacts that host only.
SERVER_MODULE = "desktop/speco3/engine/chatapi.py"
#: what a SAMP peer on this desktop may make the app fetch: loopback URLs only, every redirect hop checked
SAMP_FETCH_MODULE = "desktop/speco3/interop/fetch.py"

GUARD = r'''
import os, socket, sys
_LOG = os.environ["SPECO3_NETLOG"]
_LOCAL = ("127.", "::1", "localhost", "0.0.0.0")

def _local(address):
    if isinstance(address, (str, bytes)) or address is None:
        return True
    host = address[0] if isinstance(address, tuple) else address
    return str(host).startswith(_LOCAL) or str(host) in ("", "::1")

def _fatal(what):
    with open(_LOG, "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()} {' '.join(sys.argv)[:200]}: {what}\n")
    os._exit(97)

def _wrap_method(name):
    real = getattr(socket.socket, name)
    def guarded(self, *args):
        address = args[-1] if args else None
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _local(address):
            _fatal(f"socket.{name}{args!r}")
        return real(self, *args)
    setattr(socket.socket, name, guarded)

for _name in ("connect", "connect_ex", "sendto"):
    _wrap_method(_name)

def _wrap_lookup(name):
    real = getattr(socket, name)
    def guarded(host, *args, **kwargs):
        if host is not None and not _local(host):
            _fatal(f"{name}({host!r})")
        return real(host, *args, **kwargs)
    setattr(socket, name, guarded)

for _name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex"):
    _wrap_lookup(_name)
'''


def _strace_works() -> bool:
    if shutil.which("strace") is None:
        return False
    try:
        proc = subprocess.run(["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect", "-o", os.devnull,
                               "true"], capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


_INET = re.compile(r"sa_family=AF_INET6?,.*?(?:inet_addr\(\"([^\"]+)\"\)|inet_pton\(AF_INET6, \"([^\"]+)\")")


def foreign_syscalls(log: str) -> list[str]:
    """strace lines of connect/sendto/sendmsg to an IPv4/IPv6 address that is not loopback."""
    bad = []
    for line in log.splitlines():
        for m in _INET.finditer(line):
            addr = m.group(1) or m.group(2)
            if not (addr.startswith("127.") or addr in ("::1", "0.0.0.0")):
                bad.append(line.strip()[:200])
    return bad


def test_strace_parser_flags_only_foreign_addresses():
    log = ('12 connect(3, {sa_family=AF_INET, sin_port=htons(443), sin_addr=inet_addr("140.82.112.3")}, 16) = 0\n'
           '12 connect(3, {sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("127.0.0.1")}, 16) = 0\n'
           '12 connect(4, {sa_family=AF_UNIX, sun_path="/tmp/.X11-unix/X0"}, 20) = 0\n'
           '12 sendto(5, "x", 1, 0, {sa_family=AF_INET6, sin6_port=htons(53), sin6_flowinfo=htonl(0), '
           'inet_pton(AF_INET6, "2001:4860::8888", &sin6_addr), sin6_scope_id=0}, 28) = 1\n')
    bad = foreign_syscalls(log)
    assert len(bad) == 2 and "140.82.112.3" in bad[0] and "2001:4860::8888" in bad[1]


def test_strace_watch_is_available():
    """The native-code watch needs strace; without it the flows below run under the Python guard only, so say so
    (a skip, hence a failure under SPECO3_STRICT_SKIPS=1)."""
    if not _strace_works():
        pytest.skip("strace is missing or cannot trace here: native network syscalls are not watched")


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """``run(argv, timeout) -> CompletedProcess`` in a network-guarded child; asserts nothing went out."""
    root = tmp_path_factory.mktemp("offline")
    (root / "guard").mkdir()
    (root / "guard" / "sitecustomize.py").write_text(GUARD, encoding="utf-8")
    use_strace = _strace_works()
    env = dict(os.environ)
    env.pop("HF_HUB_OFFLINE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(root / "guard"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["GGML_NO_BACKTRACE"] = "1"
    for name in ("DATA", "CONFIG", "CACHE"):
        env[f"SPECO3_{name}_DIR"] = str(root / name.lower())
    counter = iter(range(1000))

    def run(argv: list[str], timeout: float = 240, ok=(0,)) -> subprocess.CompletedProcess:
        n = next(counter)
        netlog, trace = root / f"net-{n}.log", root / f"strace-{n}.log"
        cmd = [sys.executable, *argv]
        if use_strace:
            cmd = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=connect,sendto,sendmsg", "-o", str(trace),
                   *cmd]
        proc = subprocess.run(cmd, env={**env, "SPECO3_NETLOG": str(netlog)}, capture_output=True, text=True,
                              timeout=timeout, cwd=root)
        attempts = netlog.read_text(encoding="utf-8") if netlog.exists() else ""
        assert not attempts, f"{argv}: network call: {attempts}"
        if use_strace:
            bad = foreign_syscalls(trace.read_text(encoding="utf-8", errors="replace"))
            assert not bad, f"{argv}: native network syscalls: {bad[:3]}"
        assert proc.returncode in ok, f"{argv}: status {proc.returncode}: {proc.stderr[-2000:]}"
        return proc

    run.root = root
    run.strace = use_strace
    return run


def test_guard_catches_a_python_connect(guarded):
    """The guard itself works: a connect to a public address is fatal and logged (the test can fail)."""
    code = "import socket; socket.create_connection(('192.0.2.1', 443), timeout=0.5)"
    with pytest.raises(AssertionError, match="network call"):
        guarded(["-c", code], timeout=60, ok=(0, 1, 97))


def test_cli_flows_make_no_network_call(guarded, spectra_dir, tmp_path):
    spectrum = str(spectra_dir / LAMOST)
    archive = str(spectra_dir / "lamost")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        "<think>Look at H-alpha.</think>\n<tool_call>\n{\"name\": \"spectral_visualization_tool\", \"arguments\": "
        "{\"wavelength_range\": [6500, 6620], \"label\": \"H-alpha\"}}\n</tool_call>",
        "<answer>\\boxed{NO}</answer> No emission.",
    ]), encoding="utf-8")
    store = tmp_path / "results.sqlite"
    guarded(["-m", "speco3", "info", spectrum])
    guarded(["-m", "speco3", "index", archive, "--workers", "2"])
    guarded(["-m", "speco3", "render", spectrum, "-o", str(tmp_path / "full.png"), "--model-size"])
    guarded(["-m", "speco3", "inspect", spectrum, "--task", "cv", "--scripted", str(script), "--quiet",
             "--out", str(tmp_path / "trace")])
    assert json.loads((tmp_path / "trace" / "trace.json").read_text(encoding="utf-8"))["steps"][-1]["outcome"] == "NO"
    guarded(["-m", "speco3", "vet", archive, "--task", "cv", "--scripted", str(script), "--out", str(store)])
    guarded(["-m", "speco3", "export", str(store), "--html", str(tmp_path / "report.html"),
             "--csv", str(tmp_path / "out.csv")])
    guarded(["-m", "speco3", "models", "list"])
    assert (tmp_path / "report.html").stat().st_size > 1000


@pytest.mark.llama
@pytest.mark.skipif(not have_llama(), reason="llama-cpp-python is not installed")
def test_inspect_on_the_tiny_model_makes_no_network_call(guarded, tiny_pair, spectra_dir, tmp_path):
    text, mmproj = tiny_pair
    proc = guarded(["-m", "speco3", "inspect", str(spectra_dir / LAMOST), "--task", "cv", "--text", str(text),
                    "--mmproj", str(mmproj), "--quiet", "--max-turns", "1", "--n-ctx", "4096", "--threads", "2",
                    "--out", str(tmp_path / "tiny")], ok=(0, 3))
    assert "trace:" in proc.stdout and (tmp_path / "tiny" / "trace.json").is_file()


@pytest.mark.gui
def test_desktop_session_makes_no_network_call(guarded, tmp_path):
    proc = guarded(["-m", "speco3.gui.app", "--screenshot-tour", str(tmp_path / "shots")])
    assert "self-test: decided by key" in proc.stdout + proc.stderr
    assert len(list((tmp_path / "shots").glob("*.png"))) >= 3


def test_suite_guard_saw_no_attempt(pytestconfig):
    """The in-process guard of tests/conftest.py recorded nothing during this session so far."""
    assert suite_network_attempts(pytestconfig) == []


# -- static checks --------------------------------------------------------------------------------------------
def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            found.add(str(node.args[0].value))
    return found


def test_only_the_download_module_imports_network_libraries():
    offenders = {}
    files = [p for top in ("desktop", "converters", "models") for p in (REPO / top).rglob("*.py")]
    assert len(files) > 50
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        hits = {m for m in _imports(path) for net in NETWORK_MODULES if m == net or m.startswith(net + ".")}
        if hits and rel not in (DOWNLOAD_MODULE, SERVER_MODULE, SAMP_FETCH_MODULE):
            offenders[rel] = sorted(hits)
    assert not offenders, offenders
    assert "huggingface_hub" in _imports(REPO / DOWNLOAD_MODULE)  # the scan does see imports inside functions
    assert "httpx" in _imports(REPO / SERVER_MODULE)
    assert "httpx" in _imports(REPO / SAMP_FETCH_MODULE)


def test_templates_from_model_files_render_only_in_a_sandbox():
    """Every jinja2 environment is sandboxed, except the report's, which only loads its packaged template."""
    unsafe = []
    for top in ("desktop", "converters", "models"):
        for path in (REPO / top).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                if name in ("Environment", "Template", "NativeEnvironment", "SandboxedEnvironment"):
                    loader = next((k.value for k in node.keywords if k.arg == "loader"), None)
                    packaged = isinstance(loader, ast.Call) and getattr(loader.func, "attr", "") == "PackageLoader"
                    if not packaged:
                        unsafe.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    assert not unsafe, unsafe
    from jinja2.exceptions import SecurityError

    from speco3_converters.chat_template import render

    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    with pytest.raises(SecurityError):
        render([{"role": "user", "content": "x"}], template=evil)
    evil_mutation = "{% set l = [] %}{{ l.append(1) }}"
    with pytest.raises(SecurityError):
        render([{"role": "user", "content": "x"}], template=evil_mutation)


def test_report_references_only_local_images(tmp_path, real_spectrum, pillow_render):
    """Model text with remote <img> tags is escaped; every src in the report is a data URI or a local file."""
    from speco3.agent import get_task
    from speco3.engine.scripted import ScriptedEngine
    from speco3.vetting import VettingStore
    from speco3.vetting.report import write_report
    from speco3.vetting.schedulers import vet_batch
    from speco3.vetting.screening import VetItem

    evil = '<img src="https://evil.example/p.png"><script src="http://evil.example/x.js"></script>'
    engine = ScriptedEngine([
        '<tool_call>\n{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [6500, 6620], '
        f'"label": {json.dumps(evil)}}}}}\n</tool_call>', f"<answer>\\boxed{{YES}}</answer> {evil}"])
    with VettingStore(tmp_path / "s.sqlite") as store:
        vet_batch([VetItem("k#0", lambda: real_spectrum, name="evil")], store, engine, get_task("cv"), pillow_render,
                  trace_root=tmp_path / "traces")
        for embed in (True, False):
            out = tmp_path / f"report-{embed}.html"
            write_report(store, out, embed_images=embed)
            html = out.read_text(encoding="utf-8")
            srcs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", html, re.IGNORECASE)
            srcs += re.findall(r"url\(\s*['\"]?([^'\")]+)", html, re.IGNORECASE)
            remote = [s for s in srcs if re.match(r"^(https?:|//|ftp:)", s.strip(), re.IGNORECASE)]
            assert not remote, remote
            assert "evil.example" in html and '<img src="https://evil' not in html and "<script src" not in html
            assert any(s.startswith("data:image/png;base64,") for s in srcs) == embed
    templates = (REPO / "desktop/speco3/vetting/templates").rglob("*")
    for t in templates:
        text = t.read_text(encoding="utf-8")
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text, re.IGNORECASE), t


@pytest.mark.gui
def test_gui_shows_model_text_as_plain_text(qtbot, real_spectrum, pillow_render):
    """Model output with remote <img> tags reaches the transcript and the verdict label escaped, never as HTML."""
    from speco3.agent import get_task, run_episode
    from speco3.engine.scripted import ScriptedEngine
    from speco3.gui.agent_panel import AgentPanel

    evil = '<img src="https://evil.example/p.png">'
    engine = ScriptedEngine([
        f"<think>{evil}</think>\n<tool_call>\n"
        '{"name": "spectral_visualization_tool", "arguments": {"wavelength_range": [6500, 6620], '
        f'"label": {json.dumps(evil)}}}}}\n</tool_call>', f"<answer>\\boxed{{NO}}</answer> {evil}"])
    panel = AgentPanel()
    qtbot.addWidget(panel)
    steps = list(run_episode(engine, real_spectrum, get_task("cv"), pillow_render))
    panel._job = 1
    for step in steps:
        if getattr(step, "kind", "") == "assistant":
            panel.append_tokens(1, 0, step.text)
        panel.add_step(1, step)
    doc_html = panel.transcript.toHtml()
    assert "evil.example" in panel.transcript.toPlainText()
    assert "<img" not in doc_html.lower()
    assert "&lt;img" in panel.verdict.text() and "<img" not in panel.verdict.text()
    # A stored trace replays the same way.
    from speco3.agent import Trace

    panel._job = None
    panel.show_trace(Trace().record(steps), "replay")
    assert "<img" not in panel.transcript.toHtml().lower()
