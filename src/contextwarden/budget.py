"""Budget and pressure: how full the view is, how fast it fills, and what each component may use.

* `Budget`: effective budget = context window − reserved output − tool schemas, and the
  pressure state of a token count against `Thresholds`. With a calibration ``scale`` (the
  provider's tokens per counted token) the limits are converted into the counter's tokens, so a
  counter that undercounts the model's tokenizer still keeps the view inside the real window.
* `PressureMonitor`: burn rate (tokens per turn), turns until overflow, and spikes (a turn
  that costs more than 3× the recent mean: usually a runaway tool loop).
* `ComponentBudgets`: soft and hard limits per component of the view, with `check_before_add`.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Literal, get_args

from .exceptions import BudgetExceeded, ConfigError, UsageError
from .models import ModelInfo, lookup_model

__all__ = [
    "COMPONENTS",
    "Budget",
    "BudgetCheck",
    "Component",
    "ComponentBudgets",
    "PressureMode",
    "PressureMonitor",
    "PressureReport",
    "PressureState",
    "Thresholds",
]

PressureState = Literal["normal", "warning", "error", "critical", "overflow"]
PressureMode = Literal["band", "ratio"]
"""How a session names its pressure state: by the compaction band or by fixed ratio thresholds
(`contextwarden.compaction.pressure`)."""
Component = Literal["system", "tools", "history", "tool_results", "memory", "output_reserve"]
COMPONENTS: tuple[Component, ...] = get_args(Component)


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """Fractions of the effective budget at which each pressure state begins (inclusive)."""

    warning: float = 0.70
    error: float = 0.90
    critical: float = 0.95
    overflow: float = 1.0
    """May exceed 1.0 when the effective budget already keeps a safety margin."""

    def __post_init__(self) -> None:
        values = (self.warning, self.error, self.critical, self.overflow)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise ConfigError(f"Thresholds must be numbers, got {values!r}.", key="thresholds")
        if not (0 < self.warning < self.error < self.critical < self.overflow < 2):
            raise ConfigError(
                f"Thresholds must be strictly increasing within (0, 2): warning={self.warning} < error={self.error} "
                f"< critical={self.critical} < overflow={self.overflow}; fix the order or the values.",
                key="thresholds",
            )

    def state(self, ratio: float) -> PressureState:
        """The state of a usage ratio (``used / effective``); each boundary belongs to the higher state."""
        if ratio >= self.overflow:
            return "overflow"
        if ratio >= self.critical:
            return "critical"
        if ratio >= self.error:
            return "error"
        if ratio >= self.warning:
            return "warning"
        return "normal"

    def at(self, state: PressureState) -> float:
        """The ratio where ``state`` begins (0.0 for ``normal``)."""
        return 0.0 if state == "normal" else float(getattr(self, state))


@dataclass(frozen=True)
class Budget:
    """The tokens a view may use: ``effective = window − reserved_output − tool_schemas``.

    With ``scale`` != 1 (a calibrated counter) ``effective = (window − reserved_output) / scale −
    tool_schemas``: the token counts this class takes and returns (``effective``, ``ratio``,
    ``state``, ``remaining``, ``tokens_at``, ``check_fits``) are the counter's, and
    `calibrated` converts one into the provider's tokens.
    """

    window: int
    """The model's context window (prompt + output), in the provider's tokens."""
    reserved_output: int
    """Tokens kept free for the model's reply, in the provider's tokens."""
    _: KW_ONLY
    tool_schemas: int = 0
    """Tokens of the tool schemas sent with every request, as the counter counts them."""
    thresholds: Thresholds = field(default_factory=Thresholds)
    scale: float = 1.0
    """The provider's tokens per counted token (`Calibration.applied`); 1.0 when not calibrated."""

    def __post_init__(self) -> None:
        for key in ("window", "reserved_output", "tool_schemas"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"Budget `{key}` must be an int >= 0, got {value!r}.", key=key)
        scale = self.scale
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale < math.inf:
            raise ConfigError(
                f"Budget `scale` must be a positive number (provider tokens per counted token), got {scale!r}.",
                key="scale",
            )
        if self.effective <= 0:
            scaled = f" / scale {self.scale:g}" if self.scale != 1 else ""
            raise ConfigError(
                f"effective budget is {self.effective} tokens: (window={self.window} − reserved_output="
                f"{self.reserved_output}){scaled} − tool_schemas={self.tool_schemas}; use a larger window, "
                "reserve less output or send fewer tool schemas.",
                key="window",
            )

    def adapted(self, *, scale: float = 1.0, served_window: int | None = None) -> Budget:
        """This budget with a calibration ``scale``, and the server's window when it is smaller.

        A served window replaces ``window``; the reserved output then keeps at most a quarter of
        it (a reply reserved for a large window must not take the whole small one).

        Raises:
            ConfigError: the result leaves no room for messages (tool schemas and reply do not fit).
        """
        window, reserved = self.window, self.reserved_output
        if served_window is not None and served_window < window:
            window, reserved = served_window, min(reserved, served_window // 4)
        return replace(self, window=window, reserved_output=reserved, scale=scale)

    @classmethod
    def for_model(
        cls,
        model: str | ModelInfo,
        *,
        reserved_output: int | None = None,
        tool_schemas: int = 0,
        thresholds: Thresholds | None = None,
    ) -> Budget:
        """The budget of a registry model.

        ``reserved_output`` defaults to the model's max output, but at most a quarter of its window:
        a model whose max output equals its window would otherwise leave no room for the prompt.

        Raises:
            UnknownModelError: ``model`` is a name the registry does not know.
        """
        info = lookup_model(model) if isinstance(model, str) else model
        if reserved_output is None:
            reserved_output = min(info.max_output, info.context_window // 4)
        return cls(
            info.context_window,
            reserved_output,
            tool_schemas=tool_schemas,
            thresholds=thresholds if thresholds is not None else Thresholds(),
        )

    @functools.cached_property
    def effective(self) -> int:
        """Tokens (the counter's) the messages of a request may use."""
        if self.scale == 1:
            return self.window - self.reserved_output - self.tool_schemas
        return math.floor((self.window - self.reserved_output) / self.scale) - self.tool_schemas

    @property
    def calibrated_effective(self) -> int:
        """The effective budget in the provider's tokens: window − reserved output − scaled tool schemas."""
        return self.window - self.reserved_output - self.calibrated(self.tool_schemas)

    def calibrated(self, tokens: int) -> int:
        """A count of the counter's tokens in the provider's tokens (rounded up)."""
        if self.scale == 1 or tokens <= 0:
            return tokens
        return math.ceil(tokens * self.scale - 1e-9)

    def ratio(self, used: int) -> float:
        """``used`` as a fraction of the effective budget."""
        return used / self.effective

    def state(self, used: int) -> PressureState:
        """The pressure state of ``used`` tokens."""
        return self.thresholds.state(used / self.effective)

    def remaining(self, used: int) -> int:
        """Tokens left before the effective budget is full (negative when over)."""
        return self.effective - used

    def tokens_at(self, state: PressureState) -> int:
        """The token count where ``state`` begins (e.g. the warning mark)."""
        return math.ceil(self.effective * self.thresholds.at(state))

    def check_fits(self, tokens: int, *, what: str = "request") -> None:
        """Raise if ``tokens`` cannot fit the effective budget at all.

        Raises:
            BudgetExceeded: ``tokens`` > effective budget.
        """
        if tokens > self.effective:
            scaled = f", counted tokens at calibration scale {self.scale:g}" if self.scale != 1 else ""
            raise BudgetExceeded(
                f"{what} needs {tokens} tokens but the effective budget is {self.effective} "
                f"(window {self.window} − reserved output {self.reserved_output} − tool schemas {self.tool_schemas}"
                f"{scaled}); shorten it, offload it to a snapshot, or use a model with a larger window.",
                budget=self.effective,
                used=tokens,
            )


@dataclass(frozen=True, kw_only=True)
class PressureReport:
    """The pressure after one turn."""

    turn: int
    """1-based turn number."""
    used: int
    """Tokens of the view after the turn."""
    delta: int
    """Change since the previous turn (negative after a compaction)."""
    ratio: float
    state: PressureState
    burn_rate: float
    """Mean growth per turn over the recent window (compactions excluded)."""
    turns_until_overflow: int | None
    """Turns at the current burn rate until the overflow mark; None when the view is not growing."""
    spike: bool
    """This turn cost more than ``spike_factor`` × the recent mean."""
    compacted: bool
    """The view shrank (or the caller said a compaction ran) on this turn."""


class PressureMonitor:
    """Tracks tokens per turn: burn rate, turns until overflow, spikes."""

    def __init__(self, budget: Budget, *, window: int = 10, spike_factor: float = 3.0, min_history: int = 3) -> None:
        """Create a monitor.

        Args:
            budget: the budget whose overflow mark ``turns_until_overflow`` counts towards.
            window: turns the burn rate averages over.
            spike_factor: a turn costing more than this × the recent mean is a spike.
            min_history: growth turns needed before spikes are flagged (the first turns set the mean).
        """
        if window < 1 or min_history < 1 or spike_factor <= 1:
            raise ConfigError(
                f"PressureMonitor needs window >= 1, min_history >= 1 and spike_factor > 1, got "
                f"{window=}, {min_history=}, {spike_factor=}.",
                key="window",
            )
        self.budget = budget
        self.window = window
        self.spike_factor = spike_factor
        self.min_history = min_history
        self._deltas: deque[int] = deque(maxlen=window)
        self._last: int | None = None
        self.turns = 0
        self.spikes = 0
        self.last: PressureReport | None = None

    @property
    def burn_rate(self) -> float:
        """Mean tokens added per turn over the recent window (0.0 before two turns)."""
        return sum(self._deltas) / len(self._deltas) if self._deltas else 0.0

    def turns_until_overflow(self, used: int | None = None) -> int | None:
        """Turns at the current burn rate until ``used`` (default: the last total) reaches the overflow mark.

        0 when already there; None when the view is not growing.
        """
        if used is None:
            used = self._last or 0
        limit = self.budget.effective * self.budget.thresholds.overflow
        if used >= limit:
            return 0
        rate = self.burn_rate
        if rate <= 0:
            return None
        return math.ceil((limit - used) / rate)

    def record_turn(self, tokens_used_total: int, *, compacted: bool = False) -> PressureReport:
        """Record the view's size after a turn.

        A turn on which the view shrank counts as a compaction: it resets the baseline and is
        left out of the burn rate.

        Raises:
            UsageError: a negative token count.
        """
        if isinstance(tokens_used_total, bool) or not isinstance(tokens_used_total, int) or tokens_used_total < 0:
            raise UsageError(f"record_turn needs the view's total tokens as an int >= 0, got {tokens_used_total!r}.")
        self.turns += 1
        delta = 0 if self._last is None else tokens_used_total - self._last
        shrank = compacted or delta < 0
        spike = False
        if self._last is not None and not shrank:
            history = self._deltas
            if len(history) >= self.min_history:
                mean = sum(history) / len(history)
                spike = mean > 0 and delta > self.spike_factor * mean
            history.append(delta)
        self.spikes += spike
        self._last = tokens_used_total
        report = PressureReport(
            turn=self.turns,
            used=tokens_used_total,
            delta=delta,
            ratio=self.budget.ratio(tokens_used_total),
            state=self.budget.state(tokens_used_total),
            burn_rate=self.burn_rate,
            turns_until_overflow=self.turns_until_overflow(tokens_used_total),
            spike=spike,
            compacted=shrank,
        )
        self.last = report
        return report


@dataclass(frozen=True, kw_only=True)
class BudgetCheck:
    """The outcome of `ComponentBudgets.check_before_add`."""

    status: Literal["ok", "soft_exceeded", "hard_exceeded"]
    component: Component | Literal["total"]
    """The component whose limit decided the status (``total`` for the overall limit)."""
    current: int
    """Tokens the component (or the total) uses now."""
    adding: int
    after: int
    """``current + adding``."""
    limit: int | None
    """The limit that was exceeded (the hard limit when ok)."""
    message: str

    @property
    def ok(self) -> bool:
        """No limit would be exceeded."""
        return self.status == "ok"


class ComponentBudgets:
    """Soft and hard token limits per component of the view (``None`` disables a limit)."""

    def __init__(
        self,
        hard: Mapping[Component, int | None],
        *,
        soft: Mapping[Component, int | None] | None = None,
        soft_ratio: float = 0.8,
        total: int | None = None,
    ) -> None:
        """Create the limits.

        Args:
            hard: hard limit per component; components left out are unlimited.
            soft: explicit soft limits; by default ``soft_ratio`` × the hard limit.
            soft_ratio: the default soft limit as a fraction of the hard one.
            total: optional limit on the sum of all components (e.g. the window).
        """
        if not 0 < soft_ratio <= 1:
            raise ConfigError(f"`soft_ratio` must be in (0, 1], got {soft_ratio!r}.", key="soft_ratio")
        self.hard: dict[Component, int | None] = {c: None for c in COMPONENTS}
        self.soft: dict[Component, int | None] = {c: None for c in COMPONENTS}
        for c, limit in hard.items():
            self.hard[_component(c)] = _limit(limit, f"hard[{c!r}]")
            self.soft[c] = None if limit is None else int(limit * soft_ratio)
        for c, limit in (soft or {}).items():
            self.soft[_component(c)] = _limit(limit, f"soft[{c!r}]")
        for c in COMPONENTS:
            h, s = self.hard[c], self.soft[c]
            if h is not None and s is not None and s > h:
                raise ConfigError(f"soft limit of {c!r} ({s}) is above its hard limit ({h}).", key=c)
        self.total = _limit(total, "total")

    @classmethod
    def from_budget(
        cls, budget: Budget, *, shares: Mapping[Component, float] | None = None, soft_ratio: float = 0.8
    ) -> ComponentBudgets:
        """Hard limits as shares of the effective budget (defaults: system 0.2, tools 0.15,
        history 0.7, tool results 0.5, memory 0.1); ``output_reserve`` is the budget's reserve and
        ``total`` the effective budget plus that reserve (shares overlap: the total binds first)."""
        shares = dict(shares or {"system": 0.2, "tools": 0.15, "history": 0.7, "tool_results": 0.5, "memory": 0.1})
        hard: dict[Component, int | None] = {c: int(budget.effective * f) for c, f in shares.items()}
        hard.setdefault("output_reserve", budget.reserved_output)
        return cls(hard, soft_ratio=soft_ratio, total=budget.effective + budget.reserved_output)

    def check_before_add(
        self, component: Component, tokens: int, current_usage: int | Mapping[Component, int]
    ) -> BudgetCheck:
        """What adding ``tokens`` to ``component`` would exceed; nothing is raised or changed.

        Args:
            component: the component that grows.
            tokens: tokens to add.
            current_usage: the component's current tokens, or the usage of every component
                (then ``total`` is checked too).
        """
        comp = _component(component)
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise UsageError(f"check_before_add needs tokens as an int >= 0, got {tokens!r}.")
        if isinstance(current_usage, Mapping):
            current = int(current_usage.get(comp, 0))
            whole: int | None = sum(int(v) for v in current_usage.values())
        else:
            current, whole = int(current_usage), None
        after = current + tokens
        hard, soft = self.hard[comp], self.soft[comp]
        if hard is not None and after > hard:
            return BudgetCheck(
                status="hard_exceeded", component=comp, current=current, adding=tokens, after=after, limit=hard,
                message=f"adding {tokens} tokens to {comp!r} would make it {after}, over its hard limit of {hard} "
                f"(now {current}); compact {comp!r} or raise its limit.",
            )  # fmt: skip
        if self.total is not None and whole is not None and whole + tokens > self.total:
            return BudgetCheck(
                status="hard_exceeded", component="total", current=whole, adding=tokens, after=whole + tokens,
                limit=self.total,
                message=f"adding {tokens} tokens to {comp!r} would bring the total to {whole + tokens}, over the "
                f"total limit of {self.total} (now {whole}); compact the view first.",
            )  # fmt: skip
        if soft is not None and after > soft:
            return BudgetCheck(
                status="soft_exceeded", component=comp, current=current, adding=tokens, after=after, limit=soft,
                message=f"adding {tokens} tokens to {comp!r} would make it {after}, over its soft limit of {soft} "
                f"(hard {hard}); consider compacting {comp!r}.",
            )  # fmt: skip
        return BudgetCheck(
            status="ok", component=comp, current=current, adding=tokens, after=after, limit=hard,
            message=f"{comp!r}: {after} tokens after adding {tokens} (soft {soft}, hard {hard}).",
        )  # fmt: skip

    def check_add(self, component: Component, tokens: int, current_usage: int | Mapping[Component, int]) -> BudgetCheck:
        """`check_before_add`, raising when a hard limit would be exceeded (soft excess is returned).

        Raises:
            BudgetExceeded: a hard limit (of the component or the total) would be exceeded.
        """
        result = self.check_before_add(component, tokens, current_usage)
        if result.status == "hard_exceeded":
            breakdown: dict[str, int] = (
                {str(k): v for k, v in current_usage.items()}
                if isinstance(current_usage, Mapping)
                else {component: result.current}
            )
            raise BudgetExceeded(result.message, budget=result.limit or 0, used=result.after, breakdown=breakdown)
        return result

    def check_usage(self, usage: Mapping[Component, int]) -> None:
        """Raise if any component (or the total) is over its hard limit now.

        Raises:
            BudgetExceeded: naming the first component over its limit, with the whole breakdown.
        """
        for comp, used in usage.items():
            hard = self.hard[_component(comp)]
            if hard is not None and used > hard:
                raise BudgetExceeded(
                    f"{comp!r} uses {used} tokens, over its hard limit of {hard}; compact {comp!r} or raise its limit.",
                    budget=hard,
                    used=used,
                    breakdown={str(k): v for k, v in usage.items()},
                )
        whole = sum(usage.values())
        if self.total is not None and whole > self.total:
            raise BudgetExceeded(
                f"the view uses {whole} tokens, over the total limit of {self.total}; compact the view.",
                budget=self.total,
                used=whole,
                breakdown={str(k): v for k, v in usage.items()},
            )


def _component(name: str) -> Component:
    if name not in COMPONENTS:
        raise ConfigError(f"unknown budget component {name!r}; use one of {list(COMPONENTS)}.", key="component")
    return name


def _limit(value: int | None, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"budget limit `{key}` must be an int >= 0 or None, got {value!r}.", key=key)
    return value
