"""Whether a table a SAMP peer sends may replace the vetting queue: the user's answer, remembered per peer name.

`QueueConsent` is the policy; the app answers its questions (a dialog) and persists ``remembered`` in its
settings. A peer's name is the ``samp.name`` it declared, which any local client may claim: remembering "yes" for
TOPCAT lets whatever calls itself TOPCAT replace the queue without asking (docs/threat-model.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The longest peer name kept (a name is the peer's own text).
MAX_NAME = 80


def peer_key(name: str) -> str:
    """The name under which an answer for a peer is kept: its declared name, trimmed and bounded."""
    return " ".join(str(name).split())[:MAX_NAME]


@dataclass
class QueueConsent:
    """``remembered``: peer name → True (always load its tables) / False (never); others are asked."""

    remembered: dict[str, bool] = field(default_factory=dict)

    def known(self, peer_name: str) -> bool | None:
        """The remembered answer for ``peer_name``, or None when the user must be asked."""
        return self.remembered.get(peer_key(peer_name))

    def answer(self, peer_name: str, load: bool, remember: bool) -> bool:
        """Record the user's answer (kept when ``remember``); returns ``load``."""
        if remember:
            self.remembered[peer_key(peer_name)] = bool(load)
        return load

    def forget(self, peer_name: str) -> None:
        self.remembered.pop(peer_key(peer_name), None)
