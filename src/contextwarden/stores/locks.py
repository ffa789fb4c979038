"""Session locks: owners, the acquire loop as a flow, lease renewal, and the timeout error.

The holder of `lock` renews a short lease (``lock_lease``, 4 s by default) while its block runs:
a daemon thread for the sync stores (`Heartbeat`), a task for the async ones (`heartbeat`). A
holder that crashed or was killed loses the lock within one lease. The lock only saves duplicate
work: state saves are compare-and-set, so even two holders could not lose an update.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable

import anyio

from ..exceptions import LockTimeout
from .ops import Flow, Sleep, StoreOps, Txn

__all__ = [
    "DEFAULT_LOCK_LEASE",
    "Heartbeat",
    "acquire_flow",
    "heartbeat",
    "lock_timeout",
    "new_owner",
    "owner_details",
    "renew_flow",
    "sole",
    "stored_lock_timeout",
]

logger = logging.getLogger(__name__)

DEFAULT_LOCK_LEASE = 4.0
"""Seconds a session lock outlives its holder's last heartbeat (the holder renews it every quarter)."""

_HOST = socket.gethostname()


def new_owner() -> str:
    """A lock owner: a unique token, then who holds it and since when (shown by `LockTimeout`)."""
    return f"{uuid.uuid4().hex}|{_HOST}|{os.getpid()}|{time.time():.3f}"


def owner_details(owner: str) -> tuple[str | None, float | None]:
    """``(holder, since)`` of a lock owner written by `new_owner` (None, None for another form)."""
    parts = owner.split("|")
    if len(parts) != 4:
        return None, None
    try:
        since = float(parts[3])
    except ValueError:
        return f"{parts[1]} pid {parts[2]}", None
    return f"{parts[1]} pid {parts[2]}", since


def lock_timeout(
    session_id: str,
    timeout: float,
    *,
    holder: str | None,
    since: float | None,
    expires_in: float | None,
    released: bool = False,
    renewal: str = "its holder renews the lease while it is alive",
) -> LockTimeout:
    """The `LockTimeout` for a lock not acquired in time, saying only what the store knows."""
    if released:
        known = "its holder released it just as the wait ran out"
    elif holder is None:
        known = "it is held by a holder the store cannot name"
    else:
        known = f"it is held by {holder}"
        if since is not None:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since))
            known += f" since {stamp} ({max(0.0, time.time() - since):.1f} s ago)"
    if expires_in is not None and not released:
        known += f"; the lease expires in {expires_in:.1f} s unless renewed ({renewal})"
    return LockTimeout(
        f"Session {session_id!r}: the lock was not acquired within {timeout} s; {known}. Retry later or raise "
        "`timeout`.",
        session_id=session_id,
        timeout=timeout,
        holder=holder,
        since=since,
        expires_in=None if released else expires_in,
    )


def stored_lock_timeout(session_id: str, timeout: float, found: tuple[str, float] | None, lease: float) -> LockTimeout:
    """The `LockTimeout` for a lock a store's lock row holds: ``found`` is ``(owner, seconds left)`` or None."""
    if found is None:
        return lock_timeout(session_id, timeout, holder=None, since=None, expires_in=None, released=True)
    holder, since = owner_details(found[0])
    # The read's "now" is taken when it is queued; a busy database can run it after a renewal,
    # and no lease ever has more than one lease left.
    expires_in = min(found[1], lease)
    return lock_timeout(session_id, timeout, holder=holder, since=since, expires_in=expires_in)


def acquire_flow(
    ops: StoreOps, session_id: str, owner: str, *, timeout: float, lease: float, tenant: str | None
) -> Flow[None]:
    """Take the session's lock for ``owner``, retrying with backoff; `LockTimeout` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    # Leases run on the wall clock, shared by every process (not the injectable `clock`).
    while not (yield Txn(ops.try_lock(session_id, owner, lease=lease, now=time.time(), tenant=tenant), write=True)):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            found = yield Txn(ops.lock_holder(session_id, now=time.time()), write=False)
            raise stored_lock_timeout(session_id, timeout, found, lease)
        yield Sleep(min(delay, remaining))
        delay = min(delay * 2, 0.05)


def renew_flow(ops: StoreOps, session_id: str, owner: str, *, lease: float) -> Flow[bool]:
    """Renew ``owner``'s lease; False when the lock is no longer its own."""
    held: bool = yield Txn(ops.renew_lock(session_id, owner, lease=lease, now=time.time()), write=True)
    return held


def _taken_over(session_id: str) -> None:
    logger.warning(
        "session %r: its lock was taken over after the lease ran out; this holder's state save is still checked "
        "by compare-and-set",
        session_id,
    )


class Heartbeat:
    """Renews a held lock's lease from a daemon thread until stopped (the sync stores' holder).

    Args:
        renew: Renews the lease once; returns False when the lock is no longer held.
        session_id: The locked session (named in the log).
        lease: The lease in seconds; it is renewed every quarter of it.
    """

    def __init__(self, renew: Callable[[], bool], session_id: str, lease: float) -> None:
        self._renew, self._session_id, self._lease = renew, session_id, lease
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"cw-lock-{session_id[:40]}", daemon=True)

    def start(self) -> None:
        """Start renewing."""
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing (the thread ends at once: its wait is the stop event)."""
        # Not joined: a renewal still running after the release finds the lock gone and does nothing.
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(self._lease / 4):
            try:
                held = self._renew()
            except Exception as exc:  # the next beat retries; the lease covers three missed ones
                if self._stopped.is_set():  # released meanwhile (the store may be closed already)
                    return
                logger.warning("session %r: renewing its lock failed (%s); retrying", self._session_id, exc)
                continue
            if not held:
                if not self._stopped.is_set():
                    _taken_over(self._session_id)
                return


async def heartbeat(renew: Callable[[], Awaitable[bool]], session_id: str, lease: float) -> None:
    """Renew the lease every quarter of it until cancelled (the async stores' holder; see `Heartbeat`)."""
    while True:
        await anyio.sleep(lease / 4)
        try:
            held = await renew()
        except Exception as exc:  # the next beat retries; the lease covers three missed ones
            logger.warning("session %r: renewing its lock failed (%s); retrying", session_id, exc)
            continue
        if not held:
            _taken_over(session_id)
            return


def sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a task group wrapped (the lock body's own), or the group itself."""
    return group.exceptions[0] if len(group.exceptions) == 1 else group
