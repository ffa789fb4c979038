"""Cross-window task state: what a fresh context window needs to resume a long task.

When a task outlives one context window, the agent checkpoints an `AgentState` (goal, success
criteria, constraints, subtasks done / current / remaining, decisions, open issues, learnings,
the compaction summary) into its session store, and the next window starts from
`AgentState.bootstrap_prompt`. Planned and done are kept apart: a completed subtask records
what the plan said *and* what was actually done, so a later window can see where they differed.

Checkpoints only move forward. Each save is a compare-and-set on the store's ``"agent"`` state
slot, so the version goes up by one per save, and a save whose window id is lower than the
stored one is refused: an older checkpoint never overwrites a newer one.

Example::

    state = AgentState(goal="Migrate the billing service", remaining=("inventory", "port", "test"))
    state = state.start_next()                  # current = "inventory"
    state = state.complete_current("listed 14 endpoints", snapshot_id="snap_...")
    state = state.save(store, "session-1")      # version 1
    ...
    resumed = AgentState.load(store, "session-1").next_window(summary="...")
    prompt = resumed.bootstrap_prompt()
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from .exceptions import AgentStateError, SchemaError, VersionConflict
from .stores.base import AsyncSessionStore, SessionStore

__all__ = ["AGENT_SLOT", "AgentState", "CompletedSubtask"]

AGENT_SLOT = "agent"
"""The state slot of the session store that holds the checkpoint."""
_KIND = "agent-state"
_FORMAT = 1
_LISTS = ("success_criteria", "constraints", "remaining", "decisions", "open_issues", "learnings")


@dataclass(frozen=True, kw_only=True)
class CompletedSubtask:
    """A finished subtask: what was planned and what was actually done, kept apart."""

    planned: str
    """The subtask as the plan stated it."""
    done: str
    """What was actually done, and its result."""
    snapshot_id: str | None = None
    """Snapshot holding the step's full input and output, when one was kept."""
    window_id: int | None = None
    """Context window the subtask was finished in."""


@dataclass(frozen=True, kw_only=True)
class AgentState:
    """A checkpoint of a long task, saved between context windows."""

    goal: str
    """The task, as the user set it."""
    window_id: int = 0
    """Context window this checkpoint belongs to (0 for the first); never goes back."""
    success_criteria: tuple[str, ...] = ()
    """How to tell the task is finished."""
    constraints: tuple[str, ...] = ()
    """Rules the work must respect."""
    completed: tuple[CompletedSubtask, ...] = ()
    """Finished subtasks, oldest first."""
    current: str | None = None
    """The subtask in progress."""
    remaining: tuple[str, ...] = ()
    """Planned subtasks not started yet, in order."""
    decisions: tuple[str, ...] = ()
    """Choices made, with their reasons, that later windows must not relitigate."""
    open_issues: tuple[str, ...] = ()
    """Known problems not solved yet."""
    learnings: tuple[str, ...] = ()
    """Facts discovered along the way (paths, commands, quirks)."""
    compaction_summary: str | None = None
    """Summary of the transcript that earlier windows compacted away."""
    saved_at: float | None = None
    """Unix time of the last save."""
    version: int = 0
    """Store version this state was loaded at or saved as (0: never saved)."""

    # --- validation ---------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """Every invariant this state breaks (empty when it is valid)."""
        found: list[str] = []
        if not isinstance(self.goal, str) or not self.goal.strip():
            found.append("missing goal: set `goal` to the task the user asked for")
        if isinstance(self.window_id, bool) or not isinstance(self.window_id, int) or self.window_id < 0:
            found.append(f"invalid window id {self.window_id!r}: use an int >= 0")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 0:
            found.append(f"invalid version {self.version!r}: use the version `load` returned, or 0")
        for name in _LISTS:
            for index, item in enumerate(getattr(self, name)):
                if not isinstance(item, str) or not item.strip():
                    found.append(f"`{name}[{index}]` is empty or not a string ({item!r:.40})")
        for index, step in enumerate(self.completed):
            if not isinstance(step, CompletedSubtask):
                found.append(f"`completed[{index}]` is a {type(step).__name__}, not a CompletedSubtask")
                continue
            if not isinstance(step.planned, str) or not step.planned.strip():
                found.append(f"`completed[{index}].planned` is empty: record what the plan said")
            if not isinstance(step.done, str) or not step.done.strip():
                found.append(f"`completed[{index}].done` is empty: record what was actually done")
        if self.current is not None and (not isinstance(self.current, str) or not self.current.strip()):
            found.append("`current` is empty: use None when no subtask is in progress")
        if self.remaining and self.current is None:
            found.append("remaining subtasks without a current one: call `start_next()` or set `current`")
        if self.current is not None and self.current in self.remaining:
            found.append(f"the current subtask {self.current!r} is also listed as remaining")
        planned_done = {step.planned for step in self.completed if isinstance(step, CompletedSubtask)}
        for item in self.remaining:
            if item in planned_done:
                found.append(f"subtask {item!r} is listed as both completed and remaining")
        if self.saved_at is not None and (not isinstance(self.saved_at, int | float) or self.saved_at < 0):
            found.append(f"invalid saved_at {self.saved_at!r}: use a Unix time")
        return found

    def validate(self) -> AgentState:
        """Return self when valid.

        Raises:
            AgentStateError: listing every problem found.
        """
        found = self.problems()
        if found:
            raise AgentStateError(f"AgentState has {len(found)} problem(s): " + "; ".join(found) + ".", problems=found)
        return self

    # --- transitions (each returns a new state) ----------------------------------------------
    def start_next(self) -> AgentState:
        """Make the first remaining subtask the current one (no-op when one is current)."""
        if self.current is not None or not self.remaining:
            return self
        return replace(self, current=self.remaining[0], remaining=self.remaining[1:])

    def complete_current(self, done: str, *, snapshot_id: str | None = None) -> AgentState:
        """Record the current subtask as done (with what was actually done) and start the next one.

        Raises:
            AgentStateError: there is no current subtask, or ``done`` is empty.
        """
        if self.current is None:
            raise AgentStateError(
                "no current subtask to complete; call `start_next()` or set `current` first.",
                problems=["no current subtask"],
            )
        if not isinstance(done, str) or not done.strip():
            raise AgentStateError("`done` is empty; say what was actually done.", problems=["empty `done`"])
        step = CompletedSubtask(planned=self.current, done=done, snapshot_id=snapshot_id, window_id=self.window_id)
        return replace(self, completed=(*self.completed, step), current=None).start_next()

    def next_window(self, *, summary: str | None = None) -> AgentState:
        """The state a new context window starts from: window id + 1, optionally a fresh compaction summary."""
        return replace(
            self,
            window_id=self.window_id + 1,
            compaction_summary=summary if summary is not None else self.compaction_summary,
        )

    # --- serialization -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the stored form; the version lives in the store, not in the dict)."""
        return {
            "kind": _KIND,
            "format": _FORMAT,
            "window_id": self.window_id,
            "goal": self.goal,
            "success_criteria": list(self.success_criteria),
            "constraints": list(self.constraints),
            "completed": [
                {"planned": s.planned, "done": s.done, "snapshot_id": s.snapshot_id, "window_id": s.window_id}
                for s in self.completed
            ],
            "current": self.current,
            "remaining": list(self.remaining),
            "decisions": list(self.decisions),
            "open_issues": list(self.open_issues),
            "learnings": list(self.learnings),
            "compaction_summary": self.compaction_summary,
            "saved_at": self.saved_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, version: int = 0) -> AgentState:
        """Inverse of `to_dict`.

        Raises:
            AgentStateError: the dict is not an agent state of a known format, or breaks an invariant.
        """
        if not isinstance(data, Mapping) or data.get("kind") != _KIND:
            raise AgentStateError("not an agent state (`kind` is not 'agent-state').", problems=["wrong kind"])
        fmt = data.get("format")
        if not isinstance(fmt, int) or fmt > _FORMAT:
            raise AgentStateError(
                f"agent state format {fmt!r} is newer than this contextwarden reads ({_FORMAT}); upgrade it.",
                problems=[f"unknown format {fmt!r}"],
            )
        try:
            completed = tuple(
                CompletedSubtask(
                    planned=step["planned"],
                    done=step["done"],
                    snapshot_id=step.get("snapshot_id"),
                    window_id=step.get("window_id"),
                )
                for step in data.get("completed", ())
            )
            state = cls(
                goal=data.get("goal", ""),
                window_id=data.get("window_id", 0),
                completed=completed,
                current=data.get("current"),
                compaction_summary=data.get("compaction_summary"),
                saved_at=data.get("saved_at"),
                version=version,
                **{name: tuple(data.get(name, ())) for name in _LISTS},
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise AgentStateError(f"malformed agent state ({exc!r}).", problems=[repr(exc)]) from None
        return state.validate()

    # --- persistence ---------------------------------------------------------------------------
    def _checked_for_save(self, session_id: str, stored: Mapping[str, Any] | None, version: int) -> None:
        self.validate()
        stored_window = stored.get("window_id", 0) if stored else 0
        if stored is not None and isinstance(stored_window, int) and self.window_id < stored_window:
            raise VersionConflict(
                f"Session {session_id!r}: this checkpoint is from window {self.window_id}, but window "
                f"{stored_window} was already saved; an older checkpoint never overwrites a newer one. Load the "
                "newer state with `AgentState.load` and continue from it.",
                session_id=session_id,
                expected=self.version,
                actual=version,
            )
        if version != self.version:
            raise VersionConflict(
                f"Session {session_id!r}: the agent state is at version {version}, but this one was loaded at "
                f"version {self.version}; another writer saved in between. Load it again and reapply your changes.",
                session_id=session_id,
                expected=self.version,
                actual=version,
            )

    def save(
        self,
        store: SessionStore,
        session_id: str,
        *,
        tenant: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> AgentState:
        """Checkpoint into the session's ``"agent"`` state slot; return the saved state (new version).

        ``tenant`` is the session's tenant: another tenant's session is missing (`SessionNotFound`).

        Raises:
            AgentStateError: the state breaks an invariant.
            VersionConflict: a newer checkpoint (higher window, or saved since this one was loaded) exists.
        """
        stored, version = store.load_state(session_id, slot=AGENT_SLOT, tenant=tenant)
        self._checked_for_save(session_id, stored, version)
        saved = replace(self, saved_at=clock())
        new_version = store.save_state(
            session_id, saved.to_dict(), expected_version=self.version, slot=AGENT_SLOT, tenant=tenant
        )
        return replace(saved, version=new_version)

    async def asave(
        self,
        store: AsyncSessionStore,
        session_id: str,
        *,
        tenant: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> AgentState:
        """Async twin of `save`."""
        stored, version = await store.load_state(session_id, slot=AGENT_SLOT, tenant=tenant)
        self._checked_for_save(session_id, stored, version)
        saved = replace(self, saved_at=clock())
        new_version = await store.save_state(
            session_id, saved.to_dict(), expected_version=self.version, slot=AGENT_SLOT, tenant=tenant
        )
        return replace(saved, version=new_version)

    @classmethod
    def _loaded(cls, session_id: str, stored: Mapping[str, Any] | None, version: int) -> AgentState | None:
        if stored is None:
            return None
        try:
            return cls.from_dict(stored, version=version)
        except AgentStateError as exc:
            raise SchemaError(
                f"Session {session_id!r}: the stored agent state is unreadable ({exc}); save a fresh AgentState "
                "or restore the session from an export.",
                session_id=session_id,
            ) from None

    @classmethod
    def load(cls, store: SessionStore, session_id: str, *, tenant: str | None = None) -> AgentState | None:
        """The session's last checkpoint, or None when none was saved (another tenant's: `SessionNotFound`)."""
        stored, version = store.load_state(session_id, slot=AGENT_SLOT, tenant=tenant)
        return cls._loaded(session_id, stored, version)

    @classmethod
    async def aload(cls, store: AsyncSessionStore, session_id: str, *, tenant: str | None = None) -> AgentState | None:
        """Async twin of `load`."""
        stored, version = await store.load_state(session_id, slot=AGENT_SLOT, tenant=tenant)
        return cls._loaded(session_id, stored, version)

    # --- rendering -----------------------------------------------------------------------------
    def bootstrap_prompt(self) -> str:
        """Instructions that let a fresh context window resume the task from this checkpoint."""
        lines = [
            f"You are resuming a long task in a fresh context window. This checkpoint was saved in window "
            f"{self.window_id}; the conversation before it is not shown. Trust the checkpoint: do not redo "
            "completed subtasks and do not reopen recorded decisions without a new reason.",
            "",
            "## Goal",
            self.goal,
        ]
        _section(lines, "Success criteria", self.success_criteria)
        _section(lines, "Constraints", self.constraints)
        if self.completed:
            lines += ["", "## Completed subtasks (planned -> actually done)"]
            for number, step in enumerate(self.completed, start=1):
                lines.append(f"{number}. planned: {step.planned}")
                lines.append(f"   done: {step.done}" + (f" [snapshot {step.snapshot_id}]" if step.snapshot_id else ""))
        if self.current is not None:
            lines += ["", "## Current subtask (in progress)", self.current]
        if self.remaining:
            lines += ["", "## Remaining subtasks (planned, in order)"]
            lines += [f"{number}. {item}" for number, item in enumerate(self.remaining, start=1)]
        _section(lines, "Decisions", self.decisions)
        _section(lines, "Open issues", self.open_issues)
        _section(lines, "Learnings", self.learnings)
        if self.compaction_summary:
            lines += ["", "## Summary of earlier context", self.compaction_summary]
        lines.append("")
        if self.current is not None:
            lines.append(
                f"Next: continue the current subtask ({self.current}). When it is finished, say what was actually "
                "done, then take the next remaining subtask."
            )
        elif self.remaining:
            lines.append(f"Next: start the subtask {self.remaining[0]!r}.")
        else:
            lines.append("Next: no subtasks remain. Check the work against the success criteria and report the result.")
        if self.completed and any(step.snapshot_id for step in self.completed):
            lines.append("Full inputs and outputs of completed subtasks can be read back by snapshot id.")
        return "\n".join(lines)

    def to_markdown(self) -> str:
        """A human-readable progress report."""
        total = len(self.completed) + (self.current is not None) + len(self.remaining)
        status = [f"window {self.window_id}", f"version {self.version}", f"{len(self.completed)}/{total} subtasks done"]
        if self.saved_at is not None:
            stamp = datetime.fromtimestamp(self.saved_at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            status.append(f"saved {stamp}")
        lines = [f"# Progress: {self.goal}", "", "_" + " · ".join(status) + "_"]
        _section(lines, "Success criteria", self.success_criteria)
        _section(lines, "Constraints", self.constraints)
        if total:
            lines += ["", "## Subtasks"]
            for step in self.completed:
                note = f" (snapshot `{step.snapshot_id}`)" if step.snapshot_id else ""
                lines.append(f"- [x] {step.planned}")
                lines.append(f"  - done: {step.done}{note}")
            if self.current is not None:
                lines.append(f"- [ ] **{self.current}** (in progress)")
            lines += [f"- [ ] {item}" for item in self.remaining]
        _section(lines, "Decisions", self.decisions)
        _section(lines, "Open issues", self.open_issues)
        _section(lines, "Learnings", self.learnings)
        if self.compaction_summary:
            lines += ["", "## Summary of earlier context", "", self.compaction_summary]
        return "\n".join(lines) + "\n"


def _section(lines: list[str], title: str, items: Sequence[str]) -> None:
    if items:
        lines += ["", f"## {title}"]
        lines += [f"- {item}" for item in items]
