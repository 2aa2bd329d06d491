"""The model-server options of ``inspect`` / ``vet`` / ``evaluate`` and ``spec-o3 server check URL``.

``--server URL`` runs the model on an OpenAI-compatible server (llama.cpp's llama-server, vLLM, SGLang) instead of
in this process; ``--model NAME`` then names the served model (default: the first one it lists) and
``--api-key-env NAME`` the environment variable holding its API key (else the OS keyring entry for the URL is
tried; the key is never printed, logged or stored). Without ``--server`` nothing here contacts any host.
"""

from __future__ import annotations

import argparse
import json
import sys

from speco3.errors import Speco3Error


def server_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model server (instead of a local model)")
    g.add_argument("--server", metavar="URL", help="OpenAI-compatible server, e.g. http://gpu-box:8080 "
                   "(--model then names the served model; default: the first it lists)")
    g.add_argument("--api-key-env", metavar="NAME", help="environment variable holding the server's API key "
                   "(default: the OS keyring entry 'spec-o3' / URL, when keyring is installed)")
    g.add_argument("--ca-bundle", metavar="FILE", help="extra CA certificates (PEM) to verify the server's TLS with")
    g.add_argument("--request-timeout", type=float, default=300.0, metavar="S",
                   help="seconds per request before it is retried (default 300)")
    g.add_argument("--retries", type=int, default=5, metavar="N",
                   help="retries of a request after 429, 5xx, a lost connection or a timeout (default 5)")


def server_config(args):
    from speco3.engine.chatapi import ServerConfig

    return ServerConfig(args.server, model=getattr(args, "model", None), api_key_env=args.api_key_env,
                        ca_bundle=args.ca_bundle, timeout_s=args.request_timeout, retries=args.retries)


def open_server_engines(args, settings, n: int, check: bool = False) -> list:
    """``n`` loaded remote engines (conversations) for the server in ``args``, sharing one HTTP client. With
    ``check`` the server's prompt is first compared with the training template (`server check`), and any
    difference is printed as a warning before the run starts."""
    from speco3.engine.remote import RemoteEngine

    first = RemoteEngine(server_config(args), settings)
    first.load()
    if check:
        warn_if_unfaithful(first.config)
    engines = [first] + [RemoteEngine(first.config, settings, client=first.client) for _ in range(n - 1)]
    for e in engines[1:]:
        e.load()
    print(f"model {first.info.model_id} on {first.config.url} ({n} conversation{'s' * (n > 1)} in flight)",
          file=sys.stderr)
    return engines


def warn_if_unfaithful(config) -> None:
    """Run the fidelity check; print its report on stderr when the server's prompt or image size differs. A server
    whose template fails on a tool turn is an error (`Speco3Error`): each zoom turn of the run would fail."""
    from speco3.agent.fidelity import check_server

    report = check_server(config)
    if report.template_failure:  # every zoom turn would fail: nothing is run
        raise Speco3Error(f"server check of {report.server}: {report.template_failure}")
    if report.error:
        print(f"warning: the server's prompt could not be checked ({report.error})", file=sys.stderr)
    elif not report.faithful:
        print(report.summary(), file=sys.stderr)
    else:
        print("server check: the prompt is the training template's, byte for byte; image tokens (full view, zoom) "
              f"{report.local_image_tokens}, {report.local_zoom_tokens} here and {report.server_image_tokens}, "
              f"{report.server_zoom_tokens} on the server", file=sys.stderr)


def register(sub) -> None:
    p = sub.add_parser("server", help="model-server tools")
    ssub = p.add_subparsers(dest="server_command", metavar="COMMAND")
    c = ssub.add_parser(
        "check", help="compare what a server feeds the model with what the local engine feeds it",
        description="Send the first turn and a tool turn of a Spec-o3 conversation to the server's template "
        "endpoints (llama-server: /apply-template and /tokenize; vLLM / SGLang: /tokenize with messages) and "
        "compare the prompt with the local engine's markup byte by byte; measure the image tokens the server makes "
        "of our image (prompt sizes of one-token completions with and without it) and compare them with ours. "
        "Exit status 0 when they agree, 4 when the prompt or the image tokens differ or the server's template "
        "fails on the conversation.")
    c.add_argument("url", metavar="URL")
    c.add_argument("--model", metavar="NAME", help="served model name (default: the first the server lists)")
    c.add_argument("--api-key-env", metavar="NAME")
    c.add_argument("--ca-bundle", metavar="FILE")
    c.add_argument("--json", action="store_true", help="print the report as JSON (also when the check fails)")
    c.add_argument("--retries", type=int, default=2, metavar="N",
                   help="retries of a request after 429, 5xx, a lost connection or a timeout (default 2; 0: fail at "
                   "once, e.g. when nothing listens)")
    c.set_defaults(func=cmd_check, request_timeout=60.0)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def cmd_check(args) -> int:
    from speco3.agent.fidelity import check_server

    args.server = args.url
    report = check_server(server_config(args))
    if report.error:
        if args.json:  # a script reading the report gets one, with the error, on a failure too
            print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False))
        raise Speco3Error(f"server check of {report.server}: {report.error}")
    if args.json:
        print(json.dumps(report.to_dict(), indent=1, ensure_ascii=False))
    else:
        print(report.summary())
    return 0 if report.faithful else 4
