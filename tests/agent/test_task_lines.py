"""The task library is the one source of line markers: vacuum wavelengths, names that say which feature they are.

Astronomers name a line by its rounded *air* wavelength ("He II 4686", "C₂ 5165") while the task files store
vacuum wavelengths. A name's number therefore checks the stored value: a list that stored air wavelengths (the
old viewer list had C₂ 4737.0) or a name that points at the wrong band fails here.
"""

from __future__ import annotations

import re

import pytest

from speco3.agent.tasks import LINE_KINDS, Line, builtin_tasks

_NUMBER = re.compile(r"\b(\d{4})\b")


def _vac_to_air(w: float) -> float:  # IAU (Morton 2000), as the viewer converts
    s2 = (1e4 / w) ** 2
    return w / (1 + 0.0000834254 + 0.02406147 / (130 - s2) + 0.00015998 / (38.9 - s2))


@pytest.mark.parametrize("task_id", ["carbon", "cv", "gm", "ss", "wd"])
def test_builtin_line_names_match_their_vacuum_wavelengths(task_id):
    lines = builtin_tasks()[task_id].lines
    assert lines and all(isinstance(ln, Line) and ln.kind in LINE_KINDS for ln in lines)
    names = [ln.name for ln in lines]
    assert len(set(names)) == len(names), names  # each marker says which line it is
    for ln in lines:
        m = _NUMBER.search(ln.name)
        if m:
            air = _vac_to_air(ln.wavelength)
            assert abs(air - int(m.group(1))) < 1.0, (ln.name, ln.wavelength, round(air, 2))  # air-vac ≥ 1.1 Å here


def test_band_heads_checked_against_reference_values():
    # Air band heads (Å): C₂ Swan (1,0) 4737.1, (0,0) 5165.2, (0,1) 5635.5, (1,3) 6122.1, (0,2) 6191.2;
    # CN red (3,0) 6926, (4,1) 7088, (2,0) 7872, (3,1) 8067; ZrO 4620.8, 5551, 5718, 6345, 6474 (the (0,0) red head).
    ref = {"carbon": {"C₂ 4737": 4737.1, "C₂ 5165": 5165.2, "C₂ 5635": 5635.5, "C₂ 6122": 6122.1, "C₂ 6191": 6191.2,
                      "CN 6926": 6926.0, "CN 7088": 7088.0, "CN 7872": 7872.0, "CN 8067": 8067.0},
           "ss": {"ZrO 4620": 4620.8, "ZrO 5551": 5551.0, "ZrO 5718": 5718.0, "ZrO 6345": 6345.0,
                  "ZrO 6474": 6474.0}}
    tasks = builtin_tasks()
    for task_id, heads in ref.items():
        got = {ln.name: ln.wavelength for ln in tasks[task_id].lines}
        for name, air in heads.items():
            assert _vac_to_air(got[name]) == pytest.approx(air, abs=0.05), name
