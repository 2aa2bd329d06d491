"""The model a run uses, as the command line and the app choose it.

`SCRIPTED_LABEL` is the model id under which the canned demo session (a `speco3.engine.scripted.ScriptedEngine`
replaying the demo catalogue's answers) is recorded, so that no table, export or report can pass it off as a
model's verdict.
"""

from __future__ import annotations

#: The model id of the scripted demo session (never a model's verdict).
SCRIPTED_LABEL = "scripted demo — not a model"
