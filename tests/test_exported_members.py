"""The package's public surface is exactly what `__all__` lists (and every name resolves)."""

from __future__ import annotations
import __future__

import contextwarden


def test_all_lists_every_public_name_once() -> None:
    public = {
        name
        for name in dir(contextwarden)
        if not name.startswith("_")
        and type(getattr(contextwarden, name)).__name__ != "module"
        and not isinstance(getattr(contextwarden, name), __future__._Feature)
    }
    assert len(contextwarden.__all__) == len(set(contextwarden.__all__))
    assert set(contextwarden.__all__) == public | {"__version__"}


def test_every_export_resolves() -> None:
    for name in contextwarden.__all__:
        assert getattr(contextwarden, name) is not None, name
