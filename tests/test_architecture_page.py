"""The architecture page tells the truth: its modules exist, every part has a tier, no import points up."""

from __future__ import annotations

import re
from pathlib import Path

from _import_graph import IMPORTS, MODULES

PAGE = Path(__file__).resolve().parents[1] / "docs" / "concepts" / "architecture.md"
TEXT = PAGE.read_text(encoding="utf-8")


def _section(heading: str) -> str:
    start = TEXT.index(f"## {heading}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start : end if end >= 0 else len(TEXT)]


def _tiers() -> dict[str, int]:
    """Unit name (``contextwarden.x``) -> tier number, from the page's tier table."""
    tiers: dict[str, int] = {}
    for row in re.findall(r"^\| (\d) [^|]+\| (.+) \|$", _section("The tiers and their modules"), flags=re.M):
        for name in re.findall(r"`([\w.]+)`", row[1]):
            unit = f"contextwarden.{name}"
            assert unit not in tiers, f"{name} is in two tiers"
            tiers[unit] = int(row[0])
    return tiers


TIERS = _tiers()


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return module
    name = ".".join(parts[:2])
    return name


def test_every_module_the_page_names_exists() -> None:
    named = set(re.findall(r"`(contextwarden(?:\.\w+)*)`", TEXT))
    assert named, "the page names no module"
    missing = sorted(name for name in named if name not in MODULES)
    assert not missing, f"docs/concepts/architecture.md names modules that do not exist: {missing}"
    assert set(TIERS) <= set(MODULES), sorted(set(TIERS) - set(MODULES))


def test_every_part_of_the_package_has_a_tier() -> None:
    units = {_unit(m) for m in MODULES} - {"contextwarden"}
    assert units == set(TIERS), (
        f"missing from the tier table: {sorted(units - set(TIERS))}; not in the package: {sorted(set(TIERS) - units)}"
    )


def test_no_import_points_to_a_higher_tier() -> None:
    upward = sorted(
        f"{imp.source}:{imp.line} (tier {TIERS[_unit(imp.source)]}) imports {imp.target} "
        f"(tier {TIERS[_unit(imp.target)]})"
        for imp in IMPORTS
        if _unit(imp.source) in TIERS
        and _unit(imp.target) in TIERS
        and TIERS[_unit(imp.target)] > TIERS[_unit(imp.source)]
    )
    assert not upward, "imports against the tiers of docs/concepts/architecture.md:\n" + "\n".join(upward)


def test_the_page_is_in_the_nav() -> None:
    nav = (PAGE.parents[2] / "mkdocs.yml").read_text(encoding="utf-8")
    assert "concepts/architecture.md" in nav
