"""Correcting a session's assumptions with what the provider reports.

Each model call gives one sample: the accountant's estimate for the request and the provider's
``prompt_tokens`` / ``input_tokens``. `Calibration` keeps an exponential moving average of
``reported / estimated`` as a correction factor, clamped so that one odd sample (a request the
estimate did not see, such as a provider-side system prompt) cannot swing it far, and exposes the
recent error of the raw estimates. A session applies the factor (``applied``) to its budget once
``min_samples`` samples agree on it; until then it applies ``prior``, a safety margin for a
counter that is not the model's own tokenizer (1.0: none).

A context-length error can also report the window the server really serves (Ollama's
``num_ctx`` and vLLM's ``max_model_len`` are often smaller than the model's); ``served_window``
keeps it, so that the session's budget adopts it and a restarted session remembers it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from typing import Any

from .._brief import brief
from ..exceptions import ConfigError, UsageError

__all__ = ["Calibration"]


class Calibration:
    """An EMA correction factor for token estimates, learned from reported usage."""

    def __init__(
        self,
        *,
        alpha: float = 0.2,
        min_factor: float = 0.5,
        max_factor: float = 2.0,
        window: int = 20,
        min_samples: int = 3,
        prior: float = 1.0,
    ) -> None:
        """Create a calibration with no samples (factor 1.0).

        Args:
            alpha: weight of the newest sample in the moving average (0 < alpha <= 1).
            min_factor: lower clamp of the factor.
            max_factor: upper clamp of the factor.
            window: how many recent samples `error` averages over.
            min_samples: samples needed before ``applied`` uses the factor (``prior`` until then).
            prior: the factor ``applied`` uses before ``min_samples`` samples: above 1.0 it counts
                every message as that much larger, a margin for a tokenizer that may undercount.
        """
        if not 0 < alpha <= 1:
            raise ConfigError(f"Calibration `alpha` must be in (0, 1], got {alpha!r}.", key="alpha")
        if not 0 < min_factor <= 1 <= max_factor:
            raise ConfigError(
                f"Calibration needs 0 < min_factor <= 1 <= max_factor, got {min_factor=}, {max_factor=}.",
                key="min_factor",
            )
        if window < 1:
            raise ConfigError(f"Calibration `window` must be >= 1, got {window!r}.", key="window")
        if not (isinstance(prior, int | float) and min_factor <= prior <= max_factor):
            raise ConfigError(
                f"Calibration `prior` must be between min_factor and max_factor, got {prior!r}.", key="prior"
            )
        if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
            raise ConfigError(f"Calibration `min_samples` must be an int >= 1, got {min_samples!r}.", key="min_samples")
        self.alpha = alpha
        self.min_samples = min_samples
        self.min_factor = min_factor
        self.max_factor = max_factor
        self.window = window
        self.prior = float(prior)
        """The factor applied before ``min_samples`` samples (a safety margin; 1.0: none)."""
        self.factor = 1.0
        """Current correction: multiply an estimate by it (1.0 until the first sample)."""
        self.samples = 0
        """Number of samples recorded."""
        self.served_window: int | None = None
        """The context window the server reported in a context-length error, when smaller than assumed."""
        self._recent: deque[tuple[int, int]] = deque(maxlen=window)

    @property
    def applied(self) -> float:
        """The factor a budget applies: ``factor`` to two decimals once ``min_samples`` were recorded, else ``prior``.

        Rounded so that the budget moves in steps, not on every sample.
        """
        if self.samples < self.min_samples:
            return round(self.prior, 2)
        return round(self.factor, 2)

    def adopt_window(self, limit: int) -> bool:
        """Remember the window a server reported, when it is smaller than the one remembered.

        Returns:
            True when ``limit`` is new information (smaller than any window adopted before).

        Raises:
            UsageError: ``limit`` is not a positive int.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise UsageError(f"Calibration.adopt_window needs the server's window as a positive int, got {limit!r}.")
        if self.served_window is not None and self.served_window <= limit:
            return False
        self.served_window = limit
        return True

    def record(self, estimated: int, reported: int) -> None:
        """Add one sample: our estimate of a request and the provider's reported prompt tokens.

        Raises:
            UsageError: a count that is not a positive int.
        """
        for key, value in (("estimated", estimated), ("reported", reported)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise UsageError(
                    f"Calibration.record needs positive token counts, got {key}={brief(value)}; "
                    "skip requests whose usage was not reported."
                )
        try:
            ratio = reported / estimated
        except OverflowError:  # an absurd report (10**400 tokens) teaches nothing: clamp like any outlier
            ratio = self.max_factor
        if self.samples == 0:
            target = ratio
        else:
            target = self.factor + self.alpha * (ratio - self.factor)
        self.factor = min(self.max_factor, max(self.min_factor, target))
        self.samples += 1
        self._recent.append((estimated, reported))

    @property
    def error(self) -> float:
        """Mean absolute relative error of the recent raw estimates, ``|est - rep| / rep`` (0.0 if none)."""
        if not self._recent:
            return 0.0
        return sum(abs(e - r) / r for e, r in self._recent) / len(self._recent)

    @property
    def corrected_error(self) -> float:
        """The same error after applying the current factor to the recent estimates."""
        if not self._recent:
            return 0.0
        return sum(abs(self.correct(e) - r) / r for e, r in self._recent) / len(self._recent)

    def correct(self, estimated: int) -> int:
        """``estimated`` scaled by the factor, rounded up (never under-counts by rounding)."""
        if estimated <= 0:
            return 0
        return math.ceil(estimated * self.factor - 1e-9)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready state (settings, factor, sample count and recent samples)."""
        return {
            "alpha": self.alpha,
            "min_factor": self.min_factor,
            "max_factor": self.max_factor,
            "window": self.window,
            "factor": self.factor,
            "samples": self.samples,
            "recent": [list(s) for s in self._recent],
            "min_samples": self.min_samples,
            "served_window": self.served_window,
            "prior": self.prior,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        """Inverse of `to_dict`.

        Raises:
            ConfigError: the state is malformed.
        """
        try:
            cal = cls(
                alpha=float(data["alpha"]),
                min_factor=float(data["min_factor"]),
                max_factor=float(data["max_factor"]),
                window=int(data["window"]),
                min_samples=int(data.get("min_samples", 3)),
                prior=float(data.get("prior", 1.0)),
            )
            factor = float(data["factor"])
            if not math.isfinite(factor):
                raise ValueError(f"factor {factor!r} is not a finite number")
            cal.factor = min(cal.max_factor, max(cal.min_factor, factor))
            cal.samples = int(data["samples"])
            for est, rep in data.get("recent", ()):
                cal._recent.append((int(est), int(rep)))
            served = data.get("served_window")
            if served is not None:
                cal.adopt_window(int(served))
        except (KeyError, TypeError, ValueError, UsageError) as exc:
            raise ConfigError(
                f"malformed Calibration state ({exc!r}); pass a dict produced by `Calibration.to_dict()`.",
                key="calibration",
            ) from None
        return cal

    def __repr__(self) -> str:
        served = f", served_window={self.served_window}" if self.served_window is not None else ""
        return f"Calibration(factor={self.factor:.4f}, samples={self.samples}, error={self.error:.4f}{served})"
