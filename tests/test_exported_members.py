"""The package's public surface is exactly what `__all__` lists (and every name resolves)."""

from __future__ import annotations
import __future__

import contextkeeper


def test_all_lists_every_public_name_once() -> None:
    public = {
        name
        for name in dir(contextkeeper)
        if not name.startswith("_")
        and type(getattr(contextkeeper, name)).__name__ != "module"
        and not isinstance(getattr(contextkeeper, name), __future__._Feature)
    }
    assert len(contextkeeper.__all__) == len(set(contextkeeper.__all__))
    assert set(contextkeeper.__all__) == public | {"__version__"}


def test_every_export_resolves() -> None:
    for name in contextkeeper.__all__:
        assert getattr(contextkeeper, name) is not None, name
