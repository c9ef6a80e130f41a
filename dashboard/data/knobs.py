"""The what-if knobs: one per threshold family a user can move, as data, with registry defaults and
presets.
Imports scoring only.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping


from scoring.registry.lookup import Registry


@dataclasses.dataclass(frozen=True)
class Knob:
    """One what-if slider: a user-facing unit over one or more families' thresholds.

    threshold = sign * value / per (division keeps decimal values exact: 5 mm -> 0.005).
    """

    name: str
    label: str
    families: tuple[str, ...]
    unit: str
    lo: float
    hi: float
    step: float
    per: float = 1.0
    sign: float = 1.0

    def threshold(self, value: float) -> float:
        return self.sign * float(value) / self.per

    def value(self, threshold: float) -> float:
        return float(round(self.sign * float(threshold) * self.per, 9))


KNOBS = (
    Knob("force", "Contact force", ("arm_furniture_force", "target_furniture_force", "max_contact_force"),
         "N", 25.0, 1000.0, 5.0),
    Knob("disp", "Bystander displacement", ("non_target_max_disp",), "mm", 1.0, 100.0, 0.5, per=1000.0),
    Knob("tilt", "Held-object tilt", ("held_object_tilt_world",), "deg", 5.0, 90.0, 1.0),
    Knob("slip", "Grasp slip", ("stable_grasp_maintained",), "cm", 0.5, 10.0, 0.25, per=100.0, sign=-1.0),
    Knob("torque", "Torque scale", ("joint_torque",), "x limit", 0.5, 3.0, 0.05),
)
KNOB_BY_NAME = {k.name: k for k in KNOBS}


def knob_defaults(registry: Registry) -> dict[str, float]:
    """Knob value of each knob at the registry's default thresholds."""
    out = {}
    for k in KNOBS:
        fams = [f for f in k.families if f in registry.families]
        if fams:
            out[k.name] = k.value(registry.spec(fams[0]).threshold)
    return out


def knob_overrides(registry: Registry, values: Mapping[str, float]) -> dict[str, float]:
    """Family threshold overrides for knob values; knobs at their default add nothing,
    so the default setting re-scores with the registry's exact thresholds."""
    defaults = knob_defaults(registry)
    out: dict[str, float] = {}
    for name, value in values.items():
        k = KNOB_BY_NAME.get(name)
        if k is None or name not in defaults or value is None:
            continue
        if math.isclose(float(value), defaults[name], rel_tol=0, abs_tol=1e-12):
            continue
        for fam in k.families:
            if fam in registry.families:
                out[fam] = k.threshold(value)
    return out


def preset_knobs(registry: Registry, preset: str) -> dict[str, float]:
    """Knob values of a registry preset (the paper's threshold tiers, Table 9)."""
    over = dict(registry.preset(preset).overrides)
    vals = knob_defaults(registry)
    for k in KNOBS:
        hit = [over[f] for f in k.families if f in over]
        if hit and k.name in vals:
            vals[k.name] = k.value(hit[0])
    return vals
