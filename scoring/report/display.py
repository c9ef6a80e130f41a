"""One vocabulary for people: the unit each quantity is shown in, how a value is written,
and the readable header of each table column (data: `assets/display.yaml`).

The store keeps SI units; the dashboard's tables, plots, sliders and red violation line,
and the replay's frame captions, all show values through `format_quantity`, so a
bystander displacement reads in millimetres everywhere. Pure Python (PyYAML only).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import yaml

from scoring.registry.lookup import DEFAULT_PATH

DISPLAY_FILE = DEFAULT_PATH / "display.yaml"
STYLES = ("screen", "plain")


@dataclasses.dataclass(frozen=True)
class DisplayUnit:
    """How one family's values are shown: `shown = stored * scale`, written with `unit`."""

    unit: str
    scale: float = 1.0

    def __call__(self, value):
        """`value` (a scalar or array, stored unit) in the shown unit."""
        return value * self.scale


@functools.cache
def _table() -> dict:
    return yaml.safe_load(DISPLAY_FILE.read_text())


def display_unit(unit: str, family: str | None = None) -> DisplayUnit:
    """The shown unit of a value stored in `unit` (a spec's `unit`), for `family` if given.

    Unknown units are shown as stored (scale 1)."""
    table = _table()
    fam = (table.get("families") or {}).get(family or "", {})
    if "unit" in fam:
        return DisplayUnit(fam["unit"], float(fam.get("scale", 1.0)))
    hit = (table.get("units") or {}).get(unit)
    return DisplayUnit(hit["unit"], float(hit["scale"])) if hit else DisplayUnit(unit, 1.0)


def unit_suffix(unit: str, *, style: str = "screen") -> str:
    """What follows the number for a shown `unit` ("°", " mm", "× limit")."""
    if style not in STYLES:
        raise ValueError(f"style: expected one of {', '.join(STYLES)}, got {style!r}")
    hit = (_table().get("suffixes") or {}).get(unit)
    if hit is not None:
        return hit[style]
    return f" {unit}" if unit else ""


def unit_label(unit: str, family: str | None = None) -> str:
    """The shown unit of a stored `unit` as a column/axis label ("mm", "°", "× limit")."""
    shown = display_unit(unit, family).unit
    return unit_suffix(shown).strip() or shown


def number_text(value: float) -> str:
    """A number with sensible digits: whole numbers from 10 up, three significant digits below."""
    return f"{value:.0f}" if abs(value) >= 10 or float(value).is_integer() else f"{value:.3g}"


def format_quantity(value, unit: str, *, family: str | None = None, style: str = "screen",
                    converted: bool = False) -> str:
    """`value` (stored in `unit`, or already shown when `converted`) as text in its shown
    unit: "22 mm", "40°", "1.04× limit" (style "screen") or "1.04x limit" (style "plain",
    for the replay font). None and non-finite values read "n/a"."""
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    du = display_unit(unit, family)
    shown = float(value) if converted else float(du(value))
    return number_text(shown) + unit_suffix(du.unit, style=style)


def object_phrase(family: str, obj: str, value: float, unit: str) -> str | None:
    """The family's phrase naming the object ("akita_black_bowl_2 moved 22 mm"), `value` in
    the stored `unit`; None when the family has no phrase. `magnitude: true` families (grasp
    slip, stored as a negative height change) state the size of the change."""
    fam = (_table().get("families") or {}).get(family) or {}
    tmpl = fam.get("phrase")
    if not tmpl:
        return None
    if fam.get("magnitude") and value is not None and math.isfinite(float(value)):
        value = abs(float(value))
    return tmpl.format(object=obj, value=format_quantity(value, unit, family=family))


_SNAKE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")


def column_label(name: str) -> str:
    """The readable header of a table column: the mapping in display.yaml, else the name
    with underscores as spaces (so no header is a raw snake_case name)."""
    hit = (_table().get("columns") or {}).get(name)
    if hit is not None:
        return hit
    return name.replace("_", " ") if _SNAKE.match(str(name)) else str(name)


def is_raw_column_name(name: str) -> bool:
    """Whether a header still looks like a code name (snake_case with an underscore)."""
    return bool(_SNAKE.match(str(name)))
