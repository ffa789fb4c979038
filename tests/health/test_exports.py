"""The health package's surface: sorted, every name resolves (Prometheus names load lazily)."""

from __future__ import annotations

import pytest

import contextwarden.health as health
import contextwarden.replay as replay


@pytest.mark.parametrize("module", [health, replay])
def test_all_is_sorted_and_resolves(module: object) -> None:
    names = module.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    for name in names:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute"):
        module.not_a_name  # type: ignore[attr-defined]  # noqa: B018
