"""The manual's tooling (docs/_ext) and layout: the command reference holds every command and option of the real
parsers, the offline link check finds broken links and anchors, docstrings cannot break the build, and the README is
a front page whose links lead into the manual. The whole build (`scripts/build-docs.sh`) runs in `scripts/test.sh`."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import fields
from pathlib import Path

import pytest

pytest.importorskip("sphinx")  # the docs extra (scripts/setup.sh --tests)
pytest.importorskip("myst_parser")

REPO = Path(__file__).resolve().parents[1]
EXT = REPO / "docs" / "_ext"
sys.path.insert(0, str(EXT))

import check_links  # noqa: E402  (docs/_ext is not a package)
import speco3_docs  # noqa: E402

from speco3.cli import build_parser  # noqa: E402
from speco3.gui.app import build_parser as desktop_parser  # noqa: E402
from speco3.vetting.stopping import Certificate  # noqa: E402


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(command path, parser) of every command below ``parser``, found here without the extension's helpers."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from walk(sub, path + (name,))


@pytest.fixture(scope="module")
def cli_page(tmp_path_factory) -> str:
    """The command reference built by Sphinx on its own (no screenshots), as HTML."""
    from sphinx.application import Sphinx

    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("out")
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(EXT)!r})\n"
        "extensions = ['myst_parser', 'speco3_docs']\nspeco3_screenshots = False\nnitpicky = True\n")
    (src / "index.md").write_text("# Commands\n\n```{speco3-cli}\n```\n")
    app = Sphinx(str(src), str(src), str(out), str(out / ".doctrees"), "html", status=None, warning=None,
                 freshenv=True, warningiserror=True)
    app.build()
    return (out / "index.html").read_text(encoding="utf-8")


def test_every_command_and_option_is_in_the_generated_reference(cli_page):
    commands = list(walk(build_parser()))
    assert len(commands) >= 30 and (("models", "pull") in [c for c, _ in commands])
    for prog, tree in (("cli", [((), build_parser())] + commands), ("desktop", [((), desktop_parser())])):
        for path, parser in tree:
            anchor = "-".join((prog,) + path)
            start = cli_page.find(f'id="{anchor}"')
            assert start >= 0, f"no section {anchor}"
            own = cli_page[start:].split("<section", 1)[0]  # up to its first sub-command's section
            terms = [re.sub(r"<[^>]+>", "", dt) for dt in re.findall(r"<dt>(.*?)</dt>", own, re.S)]
            for action in parser._actions:
                if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                    continue
                names = action.option_strings or [str(action.metavar or action.dest)]
                for name in names:
                    assert any(re.search(rf"(^|[ ,]){re.escape(name)}($|[ ,])", term) for term in terms), (anchor, name)
    assert "--screenshot-tour" not in cli_page  # hidden options stay hidden


def test_the_reference_links_each_subcommand(cli_page):
    for path, _ in walk(build_parser()):
        if len(path) > 1:
            assert f'href="#cli-{"-".join(path)}"' in cli_page, path


def test_link_check_finds_broken_files_and_anchors(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text('<h1 id="top">x</h1><a href="sub/page.html#here">ok</a><a href="#top">ok</a>'
                                         '<a href="https://example.org/">not fetched</a><img src="missing.png">')
    (tmp_path / "sub" / "page.html").write_text('<p id="here"></p><a href="../index.html#nowhere">bad</a>'
                                                '<a href="../../outside.html">out</a>')
    broken, external = check_links.broken_links(tmp_path)
    assert external == 1
    assert sorted(broken) == ["index.html: missing.png: no such file",
                              "sub/page.html: ../../outside.html: points outside the site",
                              "sub/page.html: ../index.html#nowhere: no anchor #nowhere"]
    assert check_links.main([str(tmp_path)]) == 1
    (tmp_path / "sub" / "page.html").write_text('<p id="here"></p>')
    (tmp_path / "missing.png").write_bytes(b"")
    assert check_links.main([str(tmp_path)]) == 0


def test_docstrings_are_plain_text_to_docutils():
    from docutils.core import publish_doctree

    doc = ["A *bold claim, `code_` and ``more``", "  indented continuation: an_underscore_ | pipe",
           "", "- item one", "  continued", "- item two [1]_", "", "Example::", "", "  >>> x = 1", "", "=====",
           "Title?", "====="]
    rst = "\n".join(speco3_docs.plain_docstring(doc))
    tree = publish_doctree(rst, settings_overrides={"report_level": 1, "halt_level": 5})
    problems = [m.astext() for m in tree.findall() if m.tagname == "system_message"]
    assert problems == []
    text = tree.astext()
    assert "A *bold claim, code_ and more indented continuation: an_underscore_ | pipe" in text
    assert "item one continued" in text and "Example::" in text and ">>> x = 1" in text


def test_numpydoc_sections_become_rubrics_and_entries():
    from docutils.core import publish_doctree

    doc = ["Summary.", "", "Parameters", "----------", "user_dir : path, optional", "    Folder (default",
           "    config_dir()/tasks).", "errors : list", "    Bad *files*.", "", "Notes", "-----", "A `code` note."]
    tree = publish_doctree("\n".join(speco3_docs.plain_docstring(doc)),
                           settings_overrides={"report_level": 1, "halt_level": 5})
    assert [m.astext() for m in tree.findall() if m.tagname == "system_message"] == []
    assert [r.astext() for r in tree.findall() if r.tagname == "rubric"] == ["Parameters", "Notes"]
    items = [i.astext() for i in tree.findall() if i.tagname == "list_item"]
    assert items == ["user_dir (path, optional) — Folder (default config_dir()/tasks).", "errors (list) — Bad *files*."]


def test_readme_is_a_front_page_into_the_manual():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    assert "bash scripts/run-demo.sh" in readme and "bash scripts/test.sh" in readme
    assert "bash scripts/build-docs.sh" in readme
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert images == ["docs/front-page.png"] and (REPO / images[0]).is_file()
    for target in re.findall(r"\]\(((?:docs/)[^)#]+)", readme):
        assert (REPO / target).exists(), target


def test_the_manual_leaves_incoming_notes_out_and_keeps_the_design_pages():
    conf = (REPO / "docs" / "conf.py").read_text(encoding="utf-8")
    assert re.search(r'exclude_patterns = \[[^\]]*"incoming"', conf)
    toc = (REPO / "docs" / "contributing" / "index.md").read_text(encoding="utf-8")
    for page in ("architecture", "design", "threat-model"):
        assert f"../{page}\n" in toc and (REPO / "docs" / f"{page}.md").is_file()


def test_every_triage_json_key_is_explained():
    """`spec-o3 triage --json` prints `Certificate.to_json()`: each of its keys has a row in the JSON reference."""
    page = (REPO / "docs" / "reference" / "json-outputs.md").read_text(encoding="utf-8")
    table = page.split("## `spec-o3 triage --json`", 1)[1]
    hidden = {"drawn_keys", "skippable_keys"}  # dropped by to_json
    missing = [f.name for f in fields(Certificate) if f.name not in hidden and f"`{f.name}`" not in table]
    assert not missing, f"triage keys without a row in docs/reference/json-outputs.md: {missing}"
