"""Training data from a vetting store (``spec-o3 export-training``): SFT trajectories, a SpecVI-Bench parquet, a
manifest.

What goes where
---------------
* ``bench.parquet``: one SpecVI-Bench row per decided spectrum and task (YES or NO; `speco3.evaluate.benchwrite`),
  the arrays re-read from the spectrum's file, the renderer's full view as its image (at the renderer's size, as
  the benchmark ships its training renders). ``spec-o3 evaluate``
  reads it, GRPO (verl) takes it as its label-only data, colleagues open it like the published benchmark.
* ``sft.jsonl`` + ``images/``: one trajectory per YES/NO decision that has evidence windows, in the format of the
  Spec-o3 cold-start data (``Maxwell-Jia/Spec-o3-ColdStartSFT``, trained with LLaMA-Factory): ShareGPT
  ``conversations`` (``from``: ``system`` / ``human`` / ``gpt``; ``value``) and ``images`` (paths relative to the
  folder), an ``<image>`` in a value where each image goes. ``dataset_info.json`` declares it to LLaMA-Factory.
* ``manifest.json``: counts per task and label, what was left out and why, the store's path and sha256, the model
  files of the verdicts the vetters saw, the renderer, the protocol and prompt versions, the app version.

A trajectory is the decision replayed through the agent loop itself (`speco3.agent.loop.run_episode` with the
replay engine `speco3.engine.scripted.ScriptedEngine`): the system turn, the task prompt with the full view, one
assistant turn per evidence window (a ``<think>`` made from the window's label, then the ``<tool_call>`` for the
window, `speco3.agent.protocol.tool_call_text`), the tool turn the loop builds (the window drawn by the renderer it
is given, prepared as the model sees it, and the tool's sentence), and the final answer (the comment as the
reasoning, ``<answer>\\boxed{YES|NO}</answer>`` with the windows as its justification). The texts of the turns are
the messages the loop built; the images are the prepared images it fed, saved as PNG (sides multiples of 28: the
Qwen2.5-VL processor leaves them as they are). Rendered with the chat template in our GGUFs (or LLaMA-Factory's
``qwen2_vl`` template) the conversation is what the app's engine is fed in an inference episode with the same
windows, except the newline the template writes after each assistant ``<|im_end|>`` (the supervised form; the
app feeds the RL form without it: tests/data/protocol/README.md).

Evidence windows are stored in the observed frame (`speco3.vetting.records.Evidence`); the tool takes rest-frame
ranges: a window becomes ``[floor(lo / (1+z)), ceil(hi / (1+z))]`` Å with the spectrum's catalogue redshift (an
edge within 0.1 Å of a whole Å is rounded to it: a window started from the model's own zooms gives its numbers).
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speco3 import __version__
from speco3.agent.loop import run_to_verdict
from speco3.agent.protocol import (
    MAX_TURNS,
    PROTOCOL_VERSION,
    answer_text,
    assistant_text,
    first_turn_messages,
    protocol_fingerprint,
    render_prompt,
    tool_call_text,
    tool_turn_messages,
    turn_body,
)
from speco3.agent.steps import AssistantStep, PromptStep, ToolStep, VerdictStep
from speco3.agent.tasks import Task, load_tasks
from speco3.agent.tool import RenderFn
from speco3.engine.base import EngineSettings, Message
from speco3.engine.scripted import ScriptedEngine
from speco3.errors import Speco3Error, SpectrumReadError, StoreError
from speco3.evaluate.benchwrite import bench_row, write_bench
from speco3.fileio import sha256_file, write_text_atomic
from speco3.imaging import DEFAULT_MAX_TOKENS, HasPixels, PreparedImage, png_bytes
from speco3.spectra import Spectrum, View, read_spectrum, to_frame
from speco3.vetting.records import Decision, Evidence, ModelVerdict, vetter_key
from speco3.vetting.store import VettingStore

logger = logging.getLogger(__name__)

SFT_FILE, BENCH_FILE, MANIFEST_FILE, DATASET_INFO_FILE, IMAGES_DIR = (
    "sft.jsonl", "bench.parquet", "manifest.json", "dataset_info.json", "images")
#: The placeholder of an image in a training record (LLaMA-Factory, verl and SpecVI-Bench's prompts).
IMAGE_TOKEN = "<image>"
SFT_FORMAT = "llamafactory-sharegpt (the format of Maxwell-Jia/Spec-o3-ColdStartSFT)"
MANIFEST_VERSION = 1
#: What `_load` says of a file read without a stored sha256 to check it against (counted as ``file_unverified``).
UNVERIFIED = "no stored sha256 to check the file against"
#: ShareGPT speaker of each chat-markup role.
SPEAKER = {"system": "system", "user": "human", "assistant": "gpt"}
#: LLaMA-Factory's declaration of the SFT file (the one the Spec-o3 cold-start recipe uses).
DATASET_INFO = {"speco3_sft": {
    "file_name": SFT_FILE, "formatting": "sharegpt",
    "columns": {"messages": "conversations", "images": "images"},
    "tags": {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
             "system_tag": "system"}}}


class TrainingExportError(Speco3Error):
    """The export cannot be made (names the store, the folder or the task)."""


@dataclass
class Label:
    """The label of one spectrum and task: the decision it comes from, and how the vetters stood."""

    decision: Decision
    vetters: int
    agreed: bool  # every vetter's latest decision is this YES/NO


def label_of(history: Sequence[Decision]) -> Label:
    """The latest decision, with the vetters' latest decisions (one per person: names counted case and spaces
    aside, `vetter_key`) to tell agreement."""
    per_vetter = {vetter_key(d.vetter): d for d in history}  # in id order: each vetter's last one wins
    latest = history[-1]
    answers = {d.decision for d in per_vetter.values()}
    return Label(latest, len(per_vetter), answers == {latest.decision} and latest.decision != "UNSURE")


#: A rest-frame edge this close to a whole Å is that whole Å (a window taken from the model's own zooms comes back
#: to the model's numbers after the observed-frame round trip, which rounds to 0.1 Å).
SNAP_A = 0.1


def rest_window(e: Evidence, z: float) -> tuple[int, int]:
    """An observed-frame evidence window as the tool's rest-frame range in whole Å: widened outwards, unless an edge
    is within `SNAP_A` of a whole Å."""
    lo, hi = to_frame(e.lo, z, "observed", "rest"), to_frame(e.hi, z, "observed", "rest")
    a = round(lo) if abs(lo - round(lo)) < SNAP_A else math.floor(lo)
    b = round(hi) if abs(hi - round(hi)) < SNAP_A else math.ceil(hi)
    return (a, b) if a < b else (math.floor(lo), math.ceil(hi))


def window_thought(i: int, task: Task, label: str, rng: tuple[int, int]) -> str:
    what = f"{label} at {rng[0]}–{rng[1]} Å" if label else f"the region {rng[0]}–{rng[1]} Å"
    if i == 0:
        return (f"The question is whether this spectrum is a {task.target_class}. I zoom into the windows that "
                f"decide it, starting with {what}.")
    return f"Next I examine {what}."


def final_turn(task: Task, verdict: str, comment: str, windows: Sequence[tuple[str, tuple[int, int]]]) -> str:
    shows = "show" if verdict == "YES" else "do not show"
    thought = comment.strip() or f"The zoomed windows {shows} the features of a {task.target_class}."
    seen = "; ".join(f"{label or 'region'} ({a}–{b} Å)" for label, (a, b) in windows)
    return assistant_text(thought, answer_text(verdict, f"Evidence examined: {seen}."))


def script(task: Task, d: Decision, z: float, max_windows: int) -> list[str]:
    """The assistant turns of a decision's trajectory (see module doc)."""
    windows = [(e.label, rest_window(e, z)) for e in d.evidence[:max_windows]]
    turns = [assistant_text(window_thought(i, task, label, rng), tool_call_text(rng, label or None))
             for i, (label, rng) in enumerate(windows)]
    return [*turns, final_turn(task, d.decision, d.comment, windows)]


def sharegpt(messages: Sequence[Message | str]) -> list[dict[str, str]]:
    """Chat messages (`Message` from the protocol builders, ``str`` for an assistant message) as ShareGPT turns, the
    text of each turn being what the chat template writes between its ``<|im_start|>ROLE\\n`` and ``<|im_end|>``."""
    out = []
    for m in messages:
        if isinstance(m, str):
            out.append({"from": SPEAKER["assistant"], "value": m})
        else:
            out.append({"from": SPEAKER["user" if m.role == "tool" else m.role],
                        "value": render_prompt(turn_body(m), image=IMAGE_TOKEN)})
    return out


def chat_messages(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A ShareGPT record as the chat messages a Hugging Face chat template reads (``{"type": "image"}`` parts where
    the images go): what LLaMA-Factory's ``qwen2_vl`` template or our GGUF's template render for training."""
    roles = {v: k for k, v in SPEAKER.items()}
    out: list[dict[str, Any]] = []
    for turn in record["conversations"]:
        pieces = turn["value"].split(IMAGE_TOKEN)
        content: list[dict[str, str]] = []
        for i, text in enumerate(pieces):
            if i:
                content.append({"type": "image"})
            if text:
                content.append({"type": "text", "text": text})
        out.append({"role": roles[turn["from"]], "content": content})
    return out


@dataclass
class Replayed:
    """A decision replayed through the agent loop: the conversation as messages and the images in order."""

    messages: list[Message | str]
    images: list[PreparedImage]
    final: VerdictStep
    full_view: bytes | None = None  # the renderer's full view as PNG, at its own size (SpecVI-Bench's ``images``)


def replay(spectrum: Spectrum, task: Task, outputs: list[str], render: RenderFn, image_max_tokens: int) -> Replayed:
    """Run the agent loop on ``spectrum`` with ``outputs`` as the assistant turns; the messages it built."""
    settings = EngineSettings(n_ctx=1 << 30, image_max_tokens=image_max_tokens, max_tokens_per_turn=1 << 30)
    drawn: list[bytes | HasPixels] = []

    def keep_full_view(view: View) -> bytes | HasPixels:
        image = render(view)
        if not view.is_zoom:
            drawn.append(image)
        return image

    steps, final = run_to_verdict(ScriptedEngine(outputs, settings=settings), spectrum, task, keep_full_view)
    messages: list[Message | str] = []
    images: list[PreparedImage] = []
    for step in steps:
        if isinstance(step, PromptStep) and step.image is not None:
            messages += first_turn_messages(step.image, step.task_text)
            images.append(step.image)
        elif isinstance(step, AssistantStep):
            messages.append(step.text)
        elif isinstance(step, ToolStep):
            messages += tool_turn_messages(step.image, step.response_text)
            if step.image is not None:
                images.append(step.image)
    return Replayed(messages, images, final, png_bytes(drawn[0]) if drawn else None)


def replay_problem(rep: Replayed, verdict: str, n_windows: int) -> str | None:
    """Why a replayed decision is no trajectory (a window the tool refused, an answer the loop did not read)."""
    tools = [m for m in rep.messages if isinstance(m, Message) and m.role == "tool"]
    refused = [t for t in tools if not any(isinstance(p, PreparedImage) for p in t.content)]
    if refused:
        return f"the zoom tool refused a window: {refused[0].content[-1]}"
    if len(tools) != n_windows or rep.final.verdict != verdict or not rep.final.strict:
        return f"the replay ended with {rep.final.outcome.value} ({rep.final.detail or 'unexpected turns'})"
    return None


@dataclass
class TrainingExport:
    """What `export_training` wrote and left out (``manifest`` is written as manifest.json)."""

    out: Path
    manifest: dict[str, Any]
    skipped: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a task whose labels are all YES (or all NO)

    @property
    def trajectories(self) -> int:
        return int(self.manifest["totals"]["trajectories"])

    @property
    def rows(self) -> int:
        return int(self.manifest["totals"]["parquet_rows"])


def _empty_counts() -> dict[str, Any]:
    return {"decided": Counter(), "parquet": Counter(), "trajectories": Counter(), "no_evidence": Counter(),
            "unsure": 0, "not_agreed": 0, "vetters_disagree": 0, "file_skipped": 0, "file_unverified": 0,
            "trajectory_skipped": 0, "windows_dropped": 0}


def _prepare_out(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TrainingExportError(f"{out}: exists and is not an empty folder; choose a new one (nothing is "
                                  "overwritten)")
    try:
        (out / IMAGES_DIR).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrainingExportError(f"{out}: cannot create the folder ({exc.strerror or exc})") from exc


def export_training(
    store_path: str | Path,
    out: str | Path,
    render: RenderFn,
    *,
    tasks: Sequence[str] | None = None,
    only_agreed: bool = False,
    image_max_tokens: int | None = None,
    renderer: str = "",
    on_skip: Callable[[str], None] | None = None,
) -> TrainingExport:
    """Write the training data of the decisions in ``store_path`` into the new folder ``out`` (see module doc).

    ``only_agreed``: only spectra and tasks decided by at least two vetters whose latest decisions all say the
    same YES or NO. Otherwise the latest decision counts (UNSURE ones are left out). A spectrum whose file is
    missing, unreadable or changed (sha256 other than the stored one) is left out; ``on_skip`` gets a line for each
    thing left out. Raises `TrainingExportError` / `StoreError` for a bad store, folder or task.
    """
    out = Path(out)
    cap = image_max_tokens or DEFAULT_MAX_TOKENS
    with VettingStore(store_path, readonly=True) as store:
        known = load_tasks(errors=[])
        decided = sorted(store.tasks())
        unknown = [t for t in (tasks or decided) if t not in known]
        if unknown and tasks:
            raise TrainingExportError(f"unknown task {unknown[0]!r}; known tasks: {', '.join(sorted(known))}")
        for tid in unknown:  # decided once, its task file gone since: said, and left out
            logger.warning("task %r of the store's decisions is not installed: left out", tid)
            if on_skip is not None:
                on_skip(f"task {tid}: its decisions are left out: the task is not installed (no task file)")
        wanted = [t for t in (tasks or decided) if t in known]
        _prepare_out(out)
        export = TrainingExport(out, {})
        counts = {t: _empty_counts() for t in wanted}
        verdicts = {v.id: v for v in store.model_verdicts(latest=False)}
        models: dict[tuple, dict[str, Any]] = {}
        rows: list[dict[str, Any]] = []
        records: list[str] = []
        hashes: dict[str, str | None] = {}

        def skip(d: Decision, what: str, reason: str) -> None:
            export.skipped.append({"spectrum_key": d.spectrum_key, "task": d.task, "left_out": what, "reason": reason})
            if on_skip is not None:
                on_skip(f"{d.spectrum_key} [{d.task}]: {what} left out: {reason}")

        for tid in wanted:
            task, c = known[tid], counts[tid]
            for latest in store.decisions(tid):
                label = label_of(store.decision_history(latest.spectrum_key, tid))
                d = label.decision
                c["decided"][d.decision] += 1
                if d.decision == "UNSURE":
                    c["unsure"] += 1
                    skip(d, "decision", "UNSURE is not a label")
                    continue
                if only_agreed and (label.vetters < 2 or not label.agreed):
                    c["not_agreed"] += 1
                    skip(d, "decision", "--only-agreed: " + (
                        "decided by one vetter" if label.vetters < 2 else
                        f"the latest decisions of its {label.vetters} vetters differ"))
                    continue
                if label.vetters > 1 and not label.agreed:
                    c["vetters_disagree"] += 1
                spectrum, why = _load(store, d, verdicts.get(d.model_verdict_id), hashes)
                if spectrum is None:
                    c["file_skipped"] += 1
                    skip(d, "spectrum", why)
                    continue
                c["file_unverified"] += why == UNVERIFIED
                _note_model(models, verdicts.get(d.model_verdict_id))
                z = float(spectrum.z)
                outputs = script(task, d, z, MAX_TURNS - 1)
                rep = replay(spectrum, task, outputs, render, cap)
                if not rep.images or rep.full_view is None:  # the full view could not be drawn: no row either
                    c["file_skipped"] += 1
                    skip(d, "spectrum", rep.final.detail)
                    continue
                rows.append(bench_row(tid, d.decision, spectrum.name, spectrum.wavelength.tolist(),
                                      spectrum.flux.tolist(), z, image=rep.full_view,
                                      prompt=f"{IMAGE_TOKEN}\n{task.text}", index=len(rows), split="train"))
                c["parquet"][d.decision] += 1
                if not d.evidence:
                    c["no_evidence"][d.decision] += 1
                    continue
                n = min(len(d.evidence), MAX_TURNS - 1)
                if len(d.evidence) > n:
                    c["windows_dropped"] += len(d.evidence) - n
                    skip(d, f"{len(d.evidence) - n} evidence window(s)",
                         f"a trajectory holds at most {n} zooms (the {MAX_TURNS}-turn budget)")
                problem = replay_problem(rep, d.decision, n)
                if problem:
                    c["trajectory_skipped"] += 1
                    skip(d, "trajectory", problem)
                    continue
                records.append(_record(out, len(records), tid, d, spectrum, rep, task))
                c["trajectories"][d.decision] += 1
        _write(out, rows, records)
        for tid in wanted:  # a class learnt from one side only: said, not refused (a first export may be so)
            labels = +counts[tid]["parquet"]
            if len(labels) == 1:
                (only, n), = labels.items()
                export.warnings.append(f"task {tid}: every exported label is {only} ({n} spectra): a model trained "
                                       "on these learns one answer; add decisions of the other kind")
        for line in export.warnings:
            logger.warning("%s", line)
        export.manifest = _manifest(store, out, wanted, counts, models, only_agreed, renderer, cap, known, export)
    write_text_atomic(out / MANIFEST_FILE, json.dumps(export.manifest, indent=1, ensure_ascii=False) + "\n")
    return export


def _load(store: VettingStore, d: Decision, verdict: ModelVerdict | None, hashes: dict[str, str | None]
          ) -> tuple[Spectrum | None, str]:
    """The decided spectrum re-read from its file (and `UNVERIFIED` when no sha256 was stored to check it against),
    or None and why not."""
    info = store.spectrum_info(d.spectrum_key)
    if info is None or not info.path:
        return None, "the store records no file for it"
    path = info.path
    if path not in hashes:
        try:
            hashes[path] = sha256_file(path)
        except OSError as exc:
            hashes[path] = None
            logger.info("cannot hash %s: %s", path, exc)
    now = hashes[path]
    if now is None:
        return None, f"its file {path} is missing or unreadable"
    stored = info.file_sha256 or (verdict.file_sha256 if verdict is not None else None)
    if stored and stored != now:
        return None, f"its file {path} changed since it was vetted (sha256 {stored[:12]}… is now {now[:12]}…)"
    try:
        return read_spectrum(path, info.index), "" if stored else UNVERIFIED
    except (SpectrumReadError, OSError) as exc:
        return None, f"its file {path} cannot be read ({exc})"


def _note_model(models: dict[tuple, dict[str, Any]], v: ModelVerdict | None) -> None:
    if v is None:
        return
    key = (v.model_id, v.quant, v.text_sha256, v.mmproj_sha256)
    entry = models.setdefault(key, {"model_id": v.model_id, "quant": v.quant, "text_sha256": v.text_sha256,
                                    "mmproj_sha256": v.mmproj_sha256, "prompt_versions": [], "decisions": 0})
    entry["decisions"] += 1
    if v.prompt_version and v.prompt_version not in entry["prompt_versions"]:
        entry["prompt_versions"].append(v.prompt_version)


def _record(out: Path, n: int, tid: str, d: Decision, spectrum: Spectrum, rep: Replayed, task: Task) -> str:
    names = []
    for i, image in enumerate(rep.images):
        name = f"{IMAGES_DIR}/{tid}_{n:05d}_{i}.png"
        try:
            (out / name).write_bytes(image.png)
        except OSError as exc:
            raise TrainingExportError(f"{out / name}: cannot write ({exc.strerror or exc})") from exc
        names.append(name)
    record = {"conversations": sharegpt(rep.messages), "images": names, "task": tid, "ground_truth": d.decision,
              "source_name": spectrum.name, "spectrum_key": d.spectrum_key, "vetter": d.vetter,
              "decided_at": d.decided_at, "evidence": [e.to_list() for e in d.evidence],
              "total_tool_calls": len(rep.images) - 1, "total_iterations": rep.final.turns,
              "prompt_version": task.prompt_version}
    return json.dumps(record, ensure_ascii=False)


def _write(out: Path, rows: list[dict[str, Any]], records: list[str]) -> None:
    try:
        write_bench(out / BENCH_FILE, rows)
        write_text_atomic(out / SFT_FILE, "".join(r + "\n" for r in records))
        write_text_atomic(out / DATASET_INFO_FILE, json.dumps(DATASET_INFO, indent=1) + "\n")
    except OSError as exc:
        raise TrainingExportError(f"{out}: cannot write ({exc.strerror or exc})") from exc


def _manifest(store: VettingStore, out: Path, wanted: list[str], counts: dict[str, dict[str, Any]],
              models: dict[tuple, dict[str, Any]], only_agreed: bool, renderer: str, cap: int,
              known: dict[str, Task], export: TrainingExport) -> dict[str, Any]:
    try:
        store_sha = sha256_file(store.path)
    except OSError as exc:  # read a moment ago: a store that vanished meanwhile
        raise StoreError(f"{store.path}: cannot hash ({exc})") from exc
    per_task = {t: {k: dict(v) if isinstance(v, Counter) else v for k, v in c.items()} for t, c in counts.items()}
    return {
        "manifest_version": MANIFEST_VERSION, "app_version": __version__,
        "store": {"path": str(store.path.resolve()), "sha256": store_sha},
        "selection": {"tasks": wanted, "only_agreed": only_agreed},
        "files": {"sft": SFT_FILE, "images": IMAGES_DIR, "parquet": BENCH_FILE, "llamafactory": DATASET_INFO_FILE},
        "sft_format": SFT_FORMAT,
        "renderer": renderer, "image_max_tokens": cap,
        "protocol": {"version": PROTOCOL_VERSION, "fingerprint": protocol_fingerprint(), "max_turns": MAX_TURNS},
        "prompt_versions": {t: known[t].prompt_version for t in wanted},
        "models_seen": list(models.values()),
        "counts": per_task,
        "totals": {"parquet_rows": sum(sum(c["parquet"].values()) for c in counts.values()),
                   "trajectories": sum(sum(c["trajectories"].values()) for c in counts.values()),
                   "left_out": len(export.skipped)},
        "left_out": export.skipped,
        "warnings": export.warnings,
    }
