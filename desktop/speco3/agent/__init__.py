"""speco3.agent: the Spec-o3 protocol, task library, zoom tool, agent loop and traces (no Qt here)."""

from __future__ import annotations

from speco3.agent.loop import EpisodeOptions, run_episode, run_to_verdict
from speco3.agent.protocol import (
    IMAGE_PLACEHOLDER,
    MAX_TURNS,
    TOOL_NAME,
    TOOL_SCHEMA_JSON,
    first_turn_parts,
    parse_answer,
    parse_tool_calls,
    render_prompt,
    tool_turn_parts,
)
from speco3.agent.steps import AssistantStep, Outcome, PromptStep, Step, ToolStep, VerdictStep, ViewSpec
from speco3.agent.tasks import Line, Task, get_task, load_task_file, load_tasks
from speco3.agent.tool import RenderFn, ToolResult, run_tool
from speco3.agent.trace import Trace, TraceError

__all__ = [
    "IMAGE_PLACEHOLDER", "MAX_TURNS", "TOOL_NAME", "TOOL_SCHEMA_JSON", "AssistantStep", "EpisodeOptions", "Line", "Outcome",
    "PromptStep", "RenderFn", "Step", "Task", "ToolResult", "ToolStep", "Trace", "TraceError", "VerdictStep",
    "ViewSpec", "first_turn_parts", "get_task", "load_task_file", "load_tasks", "parse_answer", "parse_tool_calls",
    "render_prompt", "run_episode", "run_to_verdict", "run_tool", "tool_turn_parts",
]
