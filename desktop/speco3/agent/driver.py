"""The driver: episodes ask for engine work (requests); one loop serves many episodes through engine slots.

An episode (`speco3.agent.loop.Episode.run`) is a generator that yields its step records and, where it needs the
engine, a *request*: `Open` (a new conversation with its sampling and first parts), `Extend` (more parts) or
`Generate` (one assistant message). The driver sends back the request's result, or throws the engine's exception
into the episode at that point (the episode turns it into its final verdict).

`drive` runs any number of episodes through the slots of `speco3.engine.parallel`: up to ``width`` at once, a new
episode started as soon as one ends (batch vetting refills its slots this way). Each pass advances every episode
that is not waiting for a generation until it asks for one (rendering its tool image and feeding its tool turn
on the way), then lets the slots take a step (batched decodes until some message is complete); the episodes whose
message is complete go on at the next pass while the others hold their state. With `SerialSlots` (one slot) the same loop is a plain single run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from speco3.agent.steps import Step
from speco3.engine.base import GenerationResult, Message, Part, Sampling, Slots
from speco3.errors import OUTCOME_ERRORS


@dataclass(frozen=True)
class Open:
    """Start a new conversation sampled with ``sampling`` and feed ``parts`` (the markup of ``messages``, which an
    engine that takes messages — a chat server — is fed instead)."""

    sampling: Sampling | None
    parts: list[Part]
    messages: list[Message] | None = None


@dataclass(frozen=True)
class Extend:
    """Append ``parts`` (the markup of ``messages``, when given) to the conversation."""

    parts: list[Part]
    messages: list[Message] | None = None


@dataclass(frozen=True)
class Generate:
    """Sample one assistant message (``GenerationResult`` comes back)."""

    max_tokens: int | None = None
    on_token: Callable[[str], None] | None = None
    cancel: threading.Event | None = None


Request = Open | Extend | Generate


@dataclass
class _Run:
    gen: Generator[Any, Any, Any]
    slot: int | None = None
    reply: GenerationResult | BaseException | None = None  # what the episode is sent (or thrown) next
    waiting: bool = False
    done: bool = False
    steps: list[Step] = field(default_factory=list)


def drive(episodes: Iterable[Generator[Any, Any, Any]], slots: Slots, width: int = 1) -> Iterator[tuple[int, Step]]:
    """Run episode generators (taken lazily, in order) through ``slots``, up to ``width`` at once; yield
    ``(episode index, step)`` as steps happen. Slots are released when their episode ends (also on close)."""
    width = max(1, min(int(width), int(slots.capacity)))
    source = iter(enumerate(episodes))
    live: dict[int, _Run] = {}
    exhausted = False
    try:
        while True:
            while not exhausted and len(live) < width:
                nxt = next(source, None)
                if nxt is None:
                    exhausted = True
                    break
                live[nxt[0]] = _Run(nxt[1])
            if not live:
                return
            for i, run in list(live.items()):
                if not run.waiting:
                    yield from _advance(i, run, slots)
                    if run.done:
                        del live[i]
            if not live or any(not run.waiting for run in live.values()) or (not exhausted and len(live) < width):
                continue  # episodes ended or are between requests: refill and advance before decoding
            by_slot = {run.slot: run for run in live.values()}
            for slot, outcome in slots.step():
                run = by_slot[slot]
                run.reply, run.waiting = outcome, False
    finally:
        for run in live.values():
            run.gen.close()
            if run.slot is not None:
                slots.release(run.slot)


def _advance(i: int, run: _Run, slots: Slots) -> Iterator[tuple[int, Step]]:
    """Run one episode until it waits for a generation or ends."""
    while True:
        reply, run.reply = run.reply, None
        try:
            item = run.gen.throw(reply) if isinstance(reply, BaseException) else run.gen.send(reply)
        except StopIteration:
            run.done = True
            if run.slot is not None:
                slots.release(run.slot)
                run.slot = None
            return
        if isinstance(item, Step):
            yield i, item
            continue
        try:
            if isinstance(item, Open):
                if run.slot is not None:
                    slots.release(run.slot)
                    run.slot = None
                run.slot = slots.open(item.sampling)
                slots.extend(run.slot, item.parts, item.messages)
            elif run.slot is None:
                raise TypeError(f"an episode yielded {type(item).__name__} before it opened a conversation")
            elif isinstance(item, Extend):
                slots.extend(run.slot, item.parts, item.messages)
            elif isinstance(item, Generate):
                slots.begin(run.slot, max_tokens=item.max_tokens, on_token=item.on_token, cancel=item.cancel)
                run.waiting = True
                return
            else:
                raise TypeError(f"an episode yielded {type(item).__name__}, neither a step nor a request")
        except OUTCOME_ERRORS as exc:  # delivered into the episode, which ends with its verdict; a bug propagates
            run.reply = exc


__all__ = ["Extend", "Generate", "Open", "Request", "drive"]
