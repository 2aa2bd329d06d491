"""`RunClaims`: the claims of one screening run on its store, and the thread that renews their lease.

Several runs on one store (two ``spec-o3 vet`` in two terminals, a job array pointed at one store, the app's
pre-screen beside a ``vet``) divide the archive between them: before a spectrum is screened its run claims it
(`speco3.vetting.store.VettingStore.claim`); a spectrum another live run claimed is left to it and looked at again
when the run's own share is done (it may have been killed meanwhile); the verdict releases the claim in the
transaction that writes it. While a run holds claims a daemon thread renews them every third of the lease (a 7B
verdict takes minutes); a run that is killed stops renewing, and its claims are taken over when the lease runs out,
or at once when its process is gone on this host.

Supported: one machine, the store on a local disk (SQLite's locking). Not supported: one store on a network file
system written from several machines (NFS/SMB locking is unreliable); there, ``--shard I/N`` per machine and
``spec-o3 merge``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from speco3.errors import StoreError
from speco3.vetting.records import ClaimHolder, ModelVerdict, RolloutRecord, Work
from speco3.vetting.store import LEASE_S, Claim, VettingStore, storable_text

logger = logging.getLogger(__name__)


class RunClaims:
    """The claims of one run (``holder``) on ``store`` for ``work``; ``since_id``: the last verdict id when the
    run began (a verdict after it is another run's); ``share=False``: a run asked for explicitly (the app's
    single-spectrum run), which claims a free spectrum but runs a held one anyway and always records."""

    def __init__(self, store: VettingStore, work: Work, *, since_id: int, lease_s: float = LEASE_S,
                 holder: ClaimHolder | None = None, share: bool = True):
        self.store = store
        self.work = work
        self.since_id = since_id
        self.lease_s = lease_s
        self.holder = holder or ClaimHolder.here()
        self.share = share
        self.held: set[str] = set()
        self._lock = threading.Lock()
        self._users = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self, key: str) -> Claim:
        """Claim ``key`` (see `VettingStore.claim`); a claimed key is renewed until released."""
        got = self.store.claim(key, self.work, self.holder, since_id=self.since_id, lease_s=self.lease_s)
        if got.state == "claimed":
            with self._lock:
                self.held.add(storable_text(key))
        return got

    def record(self, v: ModelVerdict, rollouts: list[RolloutRecord] | tuple = ()) -> bool:
        """Record ``v`` and release its claim in one transaction; False when another run's verdict came first
        (nothing written; see `VettingStore.record_claimed_verdict`)."""
        vid = self.store.record_claimed_verdict(v, rollouts, self.work, self.holder,
                                                since_id=self.since_id if self.share else None)
        with self._lock:
            self.held.discard(storable_text(v.spectrum_key))
        return vid is not None

    def release(self, key: str) -> None:
        """Give ``key`` up without a verdict (cancelled: another run may take it at once)."""
        with self._lock:
            self.held.discard(storable_text(key))
        self.store.release_claims(self.holder, [key], self.work)

    def release_all(self) -> None:
        """Give up every claim this run still holds (its end); a store that fails is logged, the lease runs out."""
        with self._lock:
            held, self.held = self.held, set()
        if held:
            try:
                self.store.release_claims(self.holder, held, self.work)
            except StoreError as exc:
                logger.warning("claims of this run not released (they expire in %.0f s): %s", self.lease_s, exc)

    def renew(self) -> None:
        """Extend the lease of the claims held now (a store that fails is logged: the next renewal tries again)."""
        with self._lock:
            n = len(self.held)
        if not n:
            return
        try:
            kept = self.store.renew_claims(self.holder, self.lease_s)
        except StoreError as exc:
            logger.warning("renewing the claims of this run failed (tried again in %.0f s): %s",
                           self.lease_s / 3, exc)
            return
        if kept < n:
            logger.warning("%d of the %d spectra this run screens were taken over by another run (this one was "
                           "stopped past its %.0f s lease); the first verdict to finish counts", n - kept, n,
                           self.lease_s)

    def _renewing(self, stop: threading.Event) -> None:
        while not stop.wait(self.lease_s / 3):
            self.renew()

    @contextmanager
    def kept(self) -> Iterator[RunClaims]:
        """Renew the claims while the block runs (nested blocks share one thread); at the end of the outermost,
        stop renewing and release what is still held."""
        with self._lock:
            self._users += 1
            if self._thread is None:
                self._stop = threading.Event()  # its own: an old thread being stopped keeps the one it waits on
                self._thread = threading.Thread(target=self._renewing, args=(self._stop,), name="claims-lease",
                                                daemon=True)
                self._thread.start()
        try:
            yield self
        finally:
            with self._lock:
                self._users -= 1
                last = self._users == 0
                thread, stop = self._thread, self._stop
                if last:
                    self._thread = None
            if last and thread is not None:
                stop.set()
                thread.join()
                self.release_all()


__all__ = ["RunClaims"]
