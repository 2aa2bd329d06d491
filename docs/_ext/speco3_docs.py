"""Sphinx extension of the Spec-o3 manual: what the manual shows of the program comes from the program.

- ``.. speco3-cli::`` (MyST: ```` ```{speco3-cli} ````) writes the command reference from the argparse parsers
  themselves (`speco3.cli.build_parser` for ``spec-o3``, `speco3.gui.app.build_parser` for ``spec-o3-desktop``):
  one section per command and sub-command, labelled ``cli-COMMAND[-ACTION]``, with its usage, description and every
  option with its help. Nothing is copied by hand, so an option added to the code is in the next build.
- ``.. speco3-store-schema:: vetting|index`` prints the tables of a vetting store or an archive index, read from a
  store the code creates in a temporary folder at build time.
- ``.. app-screenshot:: NAME`` is a figure of the app's own screenshot NAME.png, made at the start of the build by
  ``app_screenshots.py`` (offscreen, 1366×768, the demo archive) into the build tree (``<build>/screenshots``); the
  pictures are never committed.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.parsers.rst.directives.images import Figure
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
#: Every picture the app's tour makes; a page may show any of them.
SHOTS = ("01-start-screen", "02-archive-and-viewer", "03-agent-streaming", "04-agent-verdict", "05-zoom-clicked",
         "06-decided-cheat-sheet", "07-task-editor", "08-triage-order", "09-export-menu")


# -- the command reference ----------------------------------------------------------------------------------------
def parsers() -> list[argparse.ArgumentParser]:
    """The two programs' parsers, as the programs build them."""
    from speco3.cli import build_parser
    from speco3.gui.app import build_parser as desktop_parser

    return [build_parser(), desktop_parser()]


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command, in the parser's own (help) order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # aliases name the same parser
                    seen.add(id(sub))
                    out.append((name, helps.get(name, ""), sub))
    return out


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path below ``parser``: ('vet',), ('models', 'pull'), …"""
    out: list[tuple[str, ...]] = []
    for name, _help, sub in subcommands(parser):
        out.append(prefix + (name,))
        out += commands(sub, prefix + (name,))
    return out


def label(prog: str, path: tuple[str, ...]) -> str:
    return "-".join(("cli" if prog == "spec-o3" else "desktop",) + path)


def option_term(action: argparse.Action) -> str:
    if action.option_strings:
        if action.nargs == 0:
            return ", ".join(action.option_strings)
        metavar = action.metavar or action.dest.upper()
        if isinstance(metavar, tuple):
            metavar = " ".join(metavar)
        if action.nargs in ("+", "*"):
            metavar = f"{metavar} …"
        return ", ".join(f"{o} {metavar}" for o in action.option_strings)
    return str(action.metavar or action.dest)


def option_help(action: argparse.Action, prog: str) -> str:
    text = (action.help or "") % {"default": action.default, "prog": prog} if action.help else ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of: {', '.join(str(c) for c in action.choices)})"
    return text.strip() or "(no help text)"


class CliReference(SphinxDirective):
    """See module doc."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        out: list[nodes.Node] = []
        for parser in parsers():
            out.append(self.section(parser, parser.prog, ()))
        return out

    def section(self, parser: argparse.ArgumentParser, prog: str, path: tuple[str, ...]) -> nodes.section:
        name = label(prog.split()[0], path)
        sec = nodes.section(ids=[name], names=[name])
        self.state.document.note_explicit_target(sec)
        sec += nodes.title(text=" ".join((prog.split()[0],) + path))
        if parser.description:
            sec += nodes.paragraph(text=parser.description)
        usage = parser.format_usage().strip()
        sec += nodes.literal_block(usage, usage, language="text")
        items = nodes.definition_list()
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            item = nodes.definition_list_item()
            term = nodes.term()
            term += nodes.literal(text=option_term(action))
            item += term
            item += nodes.definition("", nodes.paragraph(text=option_help(action, prog)))
            items += item
        if len(items):
            sec += nodes.rubric(text="Arguments and options")
            sec += items
        subs = subcommands(parser)
        if subs:
            sec += nodes.rubric(text="Commands")
            table = nodes.bullet_list()
            for sub_name, sub_help, _ in subs:
                ref = nodes.reference("", "", internal=True, refid=label(prog.split()[0], path + (sub_name,)))
                ref += nodes.literal(text=sub_name)
                para = nodes.paragraph()
                para += ref
                para += nodes.Text(f" — {sub_help}" if sub_help else "")
                table += nodes.list_item("", para)
            sec += table
            for sub_name, _help, sub in subs:
                sec += self.section(sub, prog, path + (sub_name,))
        return sec


# -- store schemas ------------------------------------------------------------------------------------------------
def schema_sql(kind: str) -> list[tuple[str, str]]:
    """(table, CREATE statement) of a new vetting store or archive index, as the code creates it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        if kind == "vetting":
            from speco3.vetting.store import VettingStore

            store = VettingStore(path)
            store.close()
        else:
            from speco3.spectra import ArchiveIndex

            index = ArchiveIndex(path)
            index.close()
        db = sqlite3.connect(path)
        try:
            rows = db.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
                              "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()
        finally:
            db.close()
    return [(name, sql) for name, sql in rows]


class StoreSchema(SphinxDirective):
    """See module doc."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        kind = self.arguments[0]
        if kind not in ("vetting", "index"):
            raise self.error(f"speco3-store-schema: 'vetting' or 'index', not {kind!r}")
        out: list[nodes.Node] = []
        for name, sql in schema_sql(kind):
            out.append(nodes.rubric(text=name))
            out.append(nodes.literal_block(sql, sql, language="sql"))
        return out


# -- docstrings ---------------------------------------------------------------------------------------------------
_LITERAL = re.compile(r"``(.+?)``|`([^`]+)`")
_SPECIAL = re.compile(r"([\\*_|\[\]<>:`#=~^+-])")
_BULLET = re.compile(r"^([-*•]|\d+[.)])\s+")


def _escaped(text: str) -> str:
    """Plain text with `code` spans kept as literals and nothing else read as markup."""
    out, last = [], 0
    for m in _LITERAL.finditer(text):
        out.append(_SPECIAL.sub(r"\\\1", text[last:m.start()]))
        code = (m.group(1) or m.group(2)).strip()
        out.append(f"``{code}``" if code and "``" not in code else _SPECIAL.sub(r"\\\1", m.group(0)))
        last = m.end()
    out.append(_SPECIAL.sub(r"\\\1", text[last:]))
    return "".join(out)


_UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
#: numpydoc sections whose entries are ``name : type`` lines with indented descriptions
_ENTRY_SECTIONS = {"parameters", "other parameters", "returns", "yields", "raises", "attributes", "warns"}


def _paragraphs(lines: list[str]) -> list[str]:
    """Plain lines (blank-separated paragraphs, "- " items, continuation lines) as escaped paragraphs and items."""
    out: list[str] = []
    items: list[list[str]] = []
    for line in lines + [""]:
        text = line.strip()
        if not text:
            for item in items:
                joined = " ".join(item)
                bullet = _BULLET.match(joined)
                out += [f"- {_escaped(joined[bullet.end():])}" if bullet else _escaped(joined), ""]
            items = []
        elif _BULLET.match(text) or not items:
            items.append([text])
        else:
            items[-1].append(text)
    return out


def _entries(lines: list[str]) -> list[str]:
    """A numpydoc section's ``name : type`` entries with their indented descriptions, as a bullet list."""
    out: list[str] = []
    base = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    for line in lines:
        if not line.strip():
            continue
        if len(line) - len(line.lstrip()) <= base:
            name, _, kind = line.strip().partition(" : ")
            out.append(f"- ``{name}``" + (f" ({_escaped(kind)})" if kind else "") if "``" not in name
                       else f"- {_escaped(line.strip())}")
        elif out:
            out[-1] += (" — " if out[-1].endswith(("``", ")")) else " ") + _escaped(line.strip())
    return [*out, ""] if out else []


def plain_docstring(lines: list[str]) -> list[str]:
    """A docstring as our sources write it (plain text, `code` in backticks, "- " lists, indented continuation
    lines, numpydoc sections such as "Parameters" over a dashed line) turned into reStructuredText that says exactly
    that: paragraphs, bullet items, section rubrics and inline literals, with every other character taken literally,
    so that no docstring can break the build or be misread as markup."""
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    i = 0
    while i < len(lines):
        if i + 1 < len(lines) and lines[i].strip() and _UNDERLINE.match(lines[i + 1]):
            sections.append((lines[i].strip(), []))
            i += 2
            continue
        sections[-1][1].append(lines[i])
        i += 1
    out: list[str] = []
    for title, body in sections:
        if title is not None:
            out += [f".. rubric:: {_escaped(title)}", ""]
        out += _entries(body) if title is not None and title.lower() in _ENTRY_SECTIONS else _paragraphs(body)
    return out


def _process_docstring(app: Sphinx, what: str, name: str, obj: object, options: object, lines: list[str]) -> None:
    lines[:] = plain_docstring(lines)


def _plain_signature(app: Sphinx, what: str, name: str, obj: object, options: object, signature: str | None,
                     return_annotation: str | None) -> tuple[str | None, str | None] | None:
    """Signatures with their parameter names and defaults, without annotations: the sources' postponed
    annotations (``'dict[str, int]'``) and private types cannot be cross-referenced; the types are in the code."""
    if signature is None or not callable(obj):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    if what in ("class", "exception", "method") and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty)), None


# -- screenshots --------------------------------------------------------------------------------------------------
def shots_dir(app: Sphinx) -> Path:
    return Path(app.outdir).resolve().parent / "screenshots"


def make_screenshots(app: Sphinx) -> None:
    """The app's tour into the build tree, once per build tree (a clean build makes them anew)."""
    if not app.config.speco3_screenshots:
        return
    folder = shots_dir(app)
    if all((folder / f"{s}.png").is_file() for s in SHOTS):
        return
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "desktop"), str(REPO / "converters"), str(REPO / "models")]
        + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}
    log.info("speco3_docs: the app makes its screenshots into %s", folder)
    proc = subprocess.run([sys.executable, str(HERE / "app_screenshots.py"), str(folder)], env=env,
                          capture_output=True, text=True, timeout=600)
    missing = [s for s in SHOTS if not (folder / f"{s}.png").is_file()]
    if proc.returncode != 0 or missing:
        raise RuntimeError(f"app_screenshots.py exited {proc.returncode} (missing {missing}):\n{proc.stderr[-3000:]}")


class AppScreenshot(Figure):
    """A figure of one of the app's build-time screenshots: ``.. app-screenshot:: 04-agent-verdict``."""

    option_spec = {**Figure.option_spec, "alt": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        env = self.state.document.settings.env
        name = self.arguments[0]
        if name not in SHOTS:
            raise self.error(f"app-screenshot: no screenshot {name!r} (the tour makes {', '.join(SHOTS)})")
        doc_dir = Path(env.doc2path(env.docname)).parent
        target = shots_dir(env.app) / f"{name}.png"
        self.arguments[0] = os.path.relpath(target, doc_dir).replace(os.sep, "/")
        self.options.setdefault("alt", f"Spec-o3 Desktop: {name[3:].replace('-', ' ')}")
        self.options.setdefault("width", "100%")
        return super().run()


def setup(app: Sphinx) -> dict[str, object]:
    app.setup_extension("sphinx.ext.autodoc")  # its events are connected below
    app.add_config_value("speco3_screenshots", True, "env", bool)  # False: no tour (a page may show none then)
    app.add_directive("speco3-cli", CliReference)
    app.add_directive("speco3-store-schema", StoreSchema)
    app.add_directive("app-screenshot", AppScreenshot)
    app.connect("builder-inited", make_screenshots)
    app.connect("autodoc-process-docstring", _process_docstring)
    app.connect("autodoc-process-signature", _plain_signature)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
