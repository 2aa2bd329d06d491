"""A run that needs one slot (a scripted engine, K=1) does not load llama.cpp's bindings for `open_slots`."""

from __future__ import annotations

import subprocess
import sys

CODE = (
    "import sys\n"
    "from speco3.engine.parallel import SerialSlots, open_slots\n"
    "from speco3.engine.scripted import ScriptedEngine\n"
    "slots = open_slots(ScriptedEngine(scripts=[['<answer>YES</answer>']]), 1)\n"
    "print(type(slots).__name__, 'speco3.engine.llama' in sys.modules, 'llama_cpp' in sys.modules)\n"
)


def test_one_slot_does_not_import_the_llama_engine(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["SerialSlots", "False", "False"]
