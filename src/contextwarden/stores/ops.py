"""The sans-IO layer: backend operations (`StoreOps`), store flows, and the drivers that run them.

A backend's operations are generators: each yields backend commands (an SQL statement, a Redis
command) and receives their results, so one implementation serves the sync and the async twin
(`drive`/`adrive` run one with a command executor). A backend's ``_run(op, write=...)`` runs one
operation inside one transaction.

A store method is one flow above them (`Flow`): a generator that yields `Txn` steps (an operation
and whether it writes, one transaction each) and `Sleep` steps, and returns the method's result.
`run_flow` and `arun_flow` drive a flow with a store's sync or async ``_run``; the flow itself
holds every check and every decision, so the sync and async stores share all of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .protocols import SessionInfo

__all__ = [
    "Flow",
    "Op",
    "Sleep",
    "StoreOps",
    "Stream",
    "T",
    "Txn",
    "adrive",
    "append_then_save",
    "aresume",
    "arun_flow",
    "arun_stream",
    "drive",
    "resume",
    "run_flow",
    "run_stream",
]

T = TypeVar("T")
Op = Generator[Any, Any, T]
"""A sans-IO store operation: yields backend commands, receives their results, returns a value."""


@dataclass(frozen=True, slots=True)
class Txn(Generic[T]):
    """One step of a flow: run ``op`` in one transaction (a write transaction when ``write``)."""

    op: Op[T]
    write: bool


@dataclass(frozen=True, slots=True)
class Sleep:
    """One step of a flow: wait ``seconds`` (``time.sleep`` or ``anyio.sleep``, by the runner)."""

    seconds: float


Flow = Generator[Txn[Any] | Sleep, Any, T]
"""A store method as a sans-IO flow: yields steps, receives each one's result, returns the method's."""
Stream = Generator[Txn[Any] | str, Any, None]
"""A flow that also yields lines of output (an export): the runner hands them to the caller."""

Runner = Callable[[Op[Any], bool], Any]
AsyncRunner = Callable[[Op[Any], bool], Awaitable[Any]]


class StoreOps(Protocol):
    """The sans-IO operations a backend implements (internal; see the module docstring).

    Operations raise `SessionNotFound` (via `not_found`) for a missing session and check its
    storage format with `check_format`. Ids arrive validated and payloads arrive as JSON text.
    An operation given a ``tenant`` treats a session of another tenant as missing, in the same
    atomic step that reads or writes it.
    """

    def setup(self) -> Op[int]: ...

    def create_session(
        self,
        session_id: str,
        *,
        tenant: str,
        model: str | None,
        window: int | None,
        metadata: str,
        created_at: float,
        last_active: float,
    ) -> Op[SessionInfo]: ...

    def get_session(self, session_id: str, *, tenant: str | None = None) -> Op[SessionInfo | None]: ...

    def touch(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]: ...

    def list_sessions(
        self, *, tenant: str | None, limit: int, after: str | None, include_archived: bool
    ) -> Op[list[SessionInfo]]: ...

    def archive(self, session_id: str, *, now: float, tenant: str | None = None) -> Op[None]: ...

    def delete_session(self, session_id: str, *, tenant: str | None = None) -> Op[None]: ...

    def expire_idle(self, *, cutoff: float) -> Op[list[str]]: ...

    def append_messages(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        *,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        """Append the new items; with ``expected``, only if the transcript has that many messages (else
        raise `transcript_moved`, writing nothing)."""
        ...

    def append_with_state(
        self,
        session_id: str,
        items: Sequence[tuple[str, str]],
        slot: str,
        body: str,
        *,
        version: int,
        token: str,
        now: float,
        tenant: str | None = None,
        expected: int | None = None,
    ) -> Op[int]:
        """`append_messages`, then the state ``slot`` saved over whatever version it holds (``version``: the
        one the writer saw), in the same transaction; `append_then_save` is the composition of the two."""
        ...

    def load_messages(
        self, session_id: str, *, start: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[tuple[int, str]]]: ...

    def count_messages(self, session_id: str, *, tenant: str | None = None) -> Op[int]: ...

    def get_message(
        self, session_id: str, message_id: str, *, tenant: str | None = None
    ) -> Op[tuple[int, str] | None]: ...

    def load_state(self, session_id: str, slot: str, *, tenant: str | None = None) -> Op[tuple[str | None, int]]: ...

    def save_state(
        self, session_id: str, slot: str, body: str, *, expected: int, now: float, token: str, tenant: str | None = None
    ) -> Op[tuple[bool, int]]: ...

    def restore_state(self, session_id: str, slot: str, body: str, *, version: int, now: float) -> Op[None]: ...

    def list_states(self, session_id: str, *, tenant: str | None = None) -> Op[list[tuple[str, str, int]]]: ...

    def put_snapshot(
        self, session_id: str, snapshot_id: str, data: bytes, metadata: str, *, now: float, tenant: str | None = None
    ) -> Op[None]: ...

    def get_snapshot(
        self, session_id: str, snapshot_id: str, *, tenant: str | None = None
    ) -> Op[tuple[bytes, str] | None]: ...

    def list_snapshots(self, session_id: str, *, tenant: str | None = None) -> Op[list[str]]: ...

    def append_audit(self, session_id: str, event: str, *, now: float, tenant: str | None = None) -> Op[None]: ...

    def read_audit(
        self, session_id: str, *, since: int, limit: int | None, tenant: str | None = None
    ) -> Op[list[str]]: ...

    def try_lock(
        self, session_id: str, owner: str, *, lease: float, now: float, tenant: str | None = None
    ) -> Op[bool]: ...

    def renew_lock(self, session_id: str, owner: str, *, lease: float, now: float) -> Op[bool]:
        """Push the lease of a lock ``owner`` holds to ``now + lease``; False when it no longer holds it."""
        ...

    def lock_holder(self, session_id: str, *, now: float) -> Op[tuple[str, float] | None]:
        """The owner of the session's lock and the seconds its lease has left; None when it is free."""
        ...

    def unlock(self, session_id: str, owner: str) -> Op[None]: ...


def drive(op: Op[T], execute: Callable[[Any], Any]) -> T:
    """Run a sans-IO operation, executing each command it yields with ``execute``."""
    try:
        command = next(op)
    except StopIteration as stop:
        result: T = stop.value
        return result
    return resume(op, command, execute)


def resume(op: Op[T], command: Any, execute: Callable[[Any], Any]) -> T:
    """Continue `drive` from a command already taken from ``op``."""
    try:
        while True:
            command = op.send(execute(command))
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        op.close()


async def adrive(op: Op[T], execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Async twin of `drive`."""
    try:
        command = next(op)
    except StopIteration as stop:
        result: T = stop.value
        return result
    return await aresume(op, command, execute)


async def aresume(op: Op[T], command: Any, execute: Callable[[Any], Awaitable[Any]]) -> T:
    """Async twin of `resume`."""
    try:
        while True:
            command = op.send(await execute(command))
    except StopIteration as stop:
        result: T = stop.value
        return result
    finally:
        op.close()


# --- flow runners -------------------------------------------------------------------------------


def run_flow(flow: Flow[T], run: Runner, sleep: Callable[[float], None]) -> T:
    """Drive ``flow``: each `Txn` through ``run(op, write)``, each `Sleep` through ``sleep``.

    A step's exception is thrown into the flow at its ``yield``, so a flow can clean up after a
    failed step (an import removes its partial session) and the caller sees the original error.
    """
    try:
        step = next(flow)
        while True:
            try:
                if isinstance(step, Sleep):
                    sleep(step.seconds)
                    result = None
                else:
                    result = run(step.op, step.write)
            except BaseException as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value
    finally:
        flow.close()


async def arun_flow(flow: Flow[T], run: AsyncRunner, sleep: Callable[[float], Awaitable[None]]) -> T:
    """Async twin of `run_flow`."""
    try:
        step = next(flow)
        while True:
            try:
                if isinstance(step, Sleep):
                    await sleep(step.seconds)
                    result = None
                else:
                    result = await run(step.op, step.write)
            except BaseException as exc:
                step = flow.throw(exc)
            else:
                step = flow.send(result)
    except StopIteration as stop:
        value: T = stop.value
        return value
    finally:
        flow.close()


def run_stream(stream: Stream, run: Runner) -> Iterator[str]:
    """Drive ``stream``, yielding the lines it yields and running each `Txn` through ``run``."""
    try:
        step = next(stream)
        while True:
            if isinstance(step, str):
                yield step
                step = next(stream)
            else:
                step = stream.send(run(step.op, step.write))
    except StopIteration:
        return
    finally:
        stream.close()


async def arun_stream(stream: Stream, run: AsyncRunner) -> AsyncIterator[str]:
    """Async twin of `run_stream`."""
    try:
        step = next(stream)
        while True:
            if isinstance(step, str):
                yield step
                step = next(stream)
            else:
                step = stream.send(await run(step.op, step.write))
    except StopIteration:
        return
    finally:
        stream.close()


def append_then_save(
    ops: StoreOps,
    session_id: str,
    items: Sequence[tuple[str, str]],
    slot: str,
    body: str,
    *,
    version: int,
    token: str,
    now: float,
    tenant: str | None = None,
    expected: int | None = None,
) -> Op[int]:
    """`StoreOps.append_with_state` as an append, then a save of the slot (retried once at the version the
    store holds: last writer wins), for a backend whose transaction holds several commands."""
    added: int = yield from ops.append_messages(session_id, items, now=now, tenant=tenant, expected=expected)
    for _ in range(2):  # the version the writer saw, else the one the store holds now
        ok, version = yield from ops.save_state(
            session_id, slot, body, expected=version, now=now, token=token, tenant=tenant
        )
        if ok:
            break
    return added
