"""Offline link check of the built manual: every link, image and anchor inside the site must resolve.

``python check_links.py HTML_DIR``: reads every ``*.html`` under HTML_DIR; each ``href``/``src`` without a URL
scheme must name a file of the site, and its ``#fragment`` an ``id`` (or ``name``) in that file. Links with a scheme
(https:, mailto:, …) are counted, never fetched: the check runs without a network. Exit 1 with one line per broken
link, else 0.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name") and (name == "id" or tag == "a"):
                self.ids.add(value)
            elif (name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script")):
                self.links.append(value)


def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(root: Path) -> tuple[list[str], int]:
    """(one line per broken link, number of external links seen) for the site under ``root``."""
    pages = {p.resolve(): parse(p) for p in sorted(root.rglob("*.html"))}
    broken: list[str] = []
    external = 0
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                external += 1
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            where = f"{path.relative_to(root.resolve())}: {link}"
            if root.resolve() not in target.parents and target != root.resolve():
                broken.append(f"{where}: points outside the site")
            elif not target.exists():
                broken.append(f"{where}: no such file")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where}: no anchor #{parts.fragment}")
    return broken, external


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        print("usage: check_links.py HTML_DIR", file=sys.stderr)
        return 2
    root = Path(args[0])
    broken, external = broken_links(root)
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    pages = len(list(root.rglob("*.html")))
    print(f"links: {pages} pages checked, {len(broken)} broken, {external} external links not fetched (offline)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
