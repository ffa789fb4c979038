"""The package's public surface is exactly what `__all__` lists, in order, and every name resolves.

The top level keeps what users call; the machinery (framings, the token accountant, rounds, the pair
validator, the event bus, snapshot stores) is imported from its own module.
"""

from __future__ import annotations
import __future__

import contextwarden


def _ruff_order(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps ``__all__`` in: SCREAMING_CASE, then CamelCase, then the rest."""
    group = 0 if len(name) > 1 and name.isupper() else 1 if name[0].isupper() else 2
    return group, name


def test_all_is_the_sorted_list_of_public_names() -> None:
    public = [
        name
        for name in vars(contextwarden)
        if (not name.startswith("_") or name == "__version__")
        and type(getattr(contextwarden, name)).__name__ != "module"
        and not isinstance(getattr(contextwarden, name), __future__._Feature)
    ]
    assert contextwarden.__all__ == sorted(public, key=_ruff_order)


def test_every_export_resolves() -> None:
    for name in contextwarden.__all__:
        assert getattr(contextwarden, name) is not None, name


def test_machinery_stays_in_its_module() -> None:
    for name in ("Round", "group_rounds", "repair", "validate", "EventBus", "TokenAccountant", "OPENAI_FRAMING"):
        assert name not in contextwarden.__all__
        assert not hasattr(contextwarden, name), name
