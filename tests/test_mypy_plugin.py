"""scripts/mypy_pyside6_plugin.py: PySide6 constructors take inherited Qt properties and signals as keywords, typed.

mypy runs for real on a small module (with the plugin as pyproject.toml loads it, and once without it): the keywords
PySide6 documents pass, a wrong value type and a keyword no class in the MRO has are still errors.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "scripts" / "mypy_pyside6_plugin.py"

SOURCE = textwrap.dedent("""\
    from PySide6.QtGui import QAction
    from PySide6.QtWidgets import QPushButton, QSpinBox


    def slot() -> None:
        return None


    ok_button = QPushButton("Go", objectName="go", toolTip="start", enabled=False, clicked=slot)
    ok_spin = QSpinBox(objectName="n", maximumWidth=40, specialValueText="auto", valueChanged=slot)
    ok_action = QAction("Run", None, triggered=slot, objectName="run")
    bad_type = QSpinBox(objectName=3)  # line 12
    bad_name = QPushButton("Go", notAProperty=1)  # line 13
    bad_signal = QSpinBox(clicked=slot)  # line 14: QSpinBox has no clicked signal
    """)


def _mypy(tmp_path: Path, plugin: bool) -> list[str]:
    mod = tmp_path / "qt_keywords.py"
    mod.write_text(SOURCE)
    cfg = tmp_path / ("with.ini" if plugin else "without.ini")
    cfg.write_text("[mypy]\npython_version = 3.11\n" + (f"plugins = {PLUGIN}\n" if plugin else ""))
    cache = tmp_path / ("cache-with" if plugin else "cache-without")
    out, err, _ = api.run(["--config-file", str(cfg), "--cache-dir", str(cache), "--no-error-summary",
                           "--hide-error-context", str(mod)])
    assert not err, err
    return [line for line in out.splitlines() if ": error:" in line]


def _lines(errors: list[str]) -> set[int]:
    return {int(e.split(":")[1]) for e in errors}


def test_plugin_accepts_inherited_keywords_and_keeps_their_types(tmp_path):
    errors = _mypy(tmp_path, plugin=True)
    assert _lines(errors) == {12, 13, 14}, errors
    assert any(":12:" in e and "objectName" in e and "str | None" in e for e in errors), errors
    assert any(":13:" in e and "notAProperty" in e for e in errors), errors
    assert any(":14:" in e and "clicked" in e for e in errors), errors


def test_stubs_alone_refuse_the_inherited_keywords(tmp_path):
    """Why the plugin exists: without it PySide6's stubs refuse objectName= on QPushButton (QObject's property).
    When this fails, the stubs list inherited keywords themselves and the plugin can go."""
    errors = _mypy(tmp_path, plugin=False)
    assert {9, 10, 11} <= _lines(errors), errors
