"""Sphinx configuration of the Spec-o3 Desktop manual (built by ``bash scripts/build-docs.sh``)."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
# The checkout's code, whatever is installed: the reference and the API pages describe this tree.
sys.path[:0] = [str(DOCS / "_ext"), str(REPO / "desktop"), str(REPO / "converters"), str(REPO / "models")]

from speco3 import __version__  # noqa: E402  (after the path above)

project = "Spec-o3 Desktop"
author = "the Spec-o3 Desktop developers"
copyright = "the Spec-o3 Desktop developers"  # noqa: A001  (Sphinx's name)
version = release = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "speco3_docs"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# incoming/: other helpers' notes, folded into the pages by hand; never part of the build.
exclude_patterns = ["_build", "incoming", "incoming/**", "front-page.png"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # "#a-heading" links to headings down to ###

nitpicky = True
# Types from outside this project: no inventory is fetched (the build is offline), so they cannot resolve.
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|astropy|sqlite3|pathlib|collections|typing|typing_extensions|os|argparse|enum|"
               r"concurrent|threading|logging|datetime|dataclasses|io|re|subprocess|PIL|pyarrow|abc)(\..*)?"),
    (r"py:class", r"(Path|Any|Callable|Iterable|Iterator|Sequence|Mapping|Self|NDArray|ndarray|np\.ndarray|"
                  r"optional|callable|Enum|Exception|ValueError|RuntimeError|OSError|int|str|float|bool|bytes|"
                  r"dict|list|tuple|set|frozenset|object|type|None)"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}

html_theme = "alabaster"
html_title = f"Spec-o3 Desktop {release}"
html_theme_options = {"description": "offline vetting of 1D spectra with Spec-o3", "fixed_sidebar": True,
                      "page_width": "1200px", "sidebar_width": "260px"}
html_show_sourcelink = False
html_static_path: list[str] = []
html_copy_source = False
smartquotes = False
