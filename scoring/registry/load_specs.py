"""The spec library, `specs.yaml`: families, their tiers and diagnostics, each checked against
the STL it declares; and `check_override`, the check of a what-if threshold.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from scoring.registry.checks import FileChecks
from scoring.registry.types import FrozenMap, OPS, Preset, Spec, TagInfo, format_stl, parse_simple_stl


# --------------------------------------------------------------------------- specs
_FAMILY_KEYS = ("name", "concern", "basis", "gate", "binary", "params")
_FAMILY_REQUIRED = ("axis", "signal", "op", "unit", "requires_all", "invalid_if_any", "tiers")
_TIER_KEYS = ("aliases", "source", "severe_anchor", "vsi_severe")
_TIER_REQUIRED = ("spec_id", "tier", "threshold", "stl")
_DIAG_KEYS = ("gate", "binary", "source", "vsi_severe", "axis")
_DIAG_REQUIRED = ("spec_id", "family", "signal", "op", "threshold", "unit", "stl",
                  "requires_all", "invalid_if_any")


def _check_stl(c: FileChecks, f: str, stl: str, signal: str, op: str, threshold: float,
               gate: str | None, binary: bool):
    parsed = parse_simple_stl(stl)
    ok = parsed is not None and parsed["signal"] == signal and parsed["gate"] == gate
    if ok and parsed["op"] is None:            # bare Boolean atom: signal > 0.5
        ok = binary and op == "gt" and threshold == 0.5
    elif ok:
        ok = parsed["op"] == op and math.isclose(parsed["threshold"], threshold, rel_tol=1e-9, abs_tol=1e-12)
    if not ok:
        c.fail(f, f"stl {stl!r} does not match the declared signal / gate / op / threshold; expected "
               f"{format_stl(signal, op, threshold, gate)!r}")


def _op(c: FileChecks, value: Any, f: str) -> str:
    if value not in OPS:
        c.fail(f, f"unknown operator {value!r}; expected one of {', '.join(OPS)}")
    return value


def _binary(c: FileChecks, value: Any, f: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        c.fail(f, f"expected true or false, got {value!r}")
    return value


def _severe(c: FileChecks, value: Any, f: str, threshold: float, binary: bool, scored: bool) -> float | None:
    if binary or not scored:
        if value is not None and binary:
            c.fail(f, "binary specs take no vsi_severe (violation depth is 1)")
        return c.number(value, f, optional=True, positive=True)
    severe = c.number(value, f, positive=True)
    if severe < abs(threshold):
        c.fail(f, f"vsi_severe {severe!r} is below |threshold| {abs(threshold)!r}: K_phi must be >= 1")
    return severe


def load_specs(path: Path, data: Any, vocab: Mapping[str, TagInfo]):
    c = FileChecks(path)
    data = c.top(data)
    c.keys(data, "", ("schema_version", "axes", "diagnostics", "presets"), required=("families",))
    axes = c.mapping(data.get("axes"), "axes", optional=True)
    seen_ids: dict[str, tuple[str, str]] = {}     # spec id / alias -> (field, family)

    def claim(name: str, f: str, family: str):
        if name in seen_ids:
            c.fail(f, f"duplicate spec id {name!r} (already used at {seen_ids[name][0]})")
        seen_ids[name] = (f, family)

    def axis(value: Any, f: str) -> str:
        c.string(value, f)
        if axes and value not in axes:
            c.fail(f, f"unknown axis {value!r}; expected one of {', '.join(axes)}")
        return value

    specs: dict[str, Spec] = {}
    for fam, d in c.mapping(data["families"], "families").items():
        f = f"families.{fam}"
        d = c.mapping(d, f)
        c.keys(d, f, _FAMILY_KEYS, required=_FAMILY_REQUIRED)
        common = dict(
            family=fam, axis=axis(d["axis"], f"{f}.axis"), signal=c.string(d["signal"], f"{f}.signal"),
            op=_op(c, d["op"], f"{f}.op"), unit=c.string(d["unit"], f"{f}.unit"),
            requires_all=c.tags(d["requires_all"], f"{f}.requires_all", vocab),
            invalid_if_any=c.tags(d["invalid_if_any"], f"{f}.invalid_if_any", vocab),
            binary=_binary(c, d.get("binary"), f"{f}.binary"),
            gate=c.string(d.get("gate"), f"{f}.gate", optional=True),
            concern=c.string(d.get("concern"), f"{f}.concern", optional=True) or "",
            name=c.string(d.get("name"), f"{f}.name", optional=True) or fam.replace("_", " "),
            params=FrozenMap(dict(c.mapping(d.get("params"), f"{f}.params", optional=True))))
        tiers = d["tiers"]
        if not isinstance(tiers, list) or not tiers:
            c.fail(f"{f}.tiers", "expected a non-empty list of tiers")
        built: list[Spec] = []
        for i, t in enumerate(tiers):
            tf = f"{f}.tiers[{i}]"
            t = c.mapping(t, tf)
            c.keys(t, tf, _TIER_KEYS, required=_TIER_REQUIRED)
            sid = c.string(t["spec_id"], f"{tf}.spec_id")
            tf = f"{f}.tiers.{sid}"
            if t["tier"] not in ("safe", "alternate"):
                c.fail(f"{tf}.tier", f"unknown tier {t['tier']!r}; expected safe or alternate")
            threshold = c.number(t["threshold"], f"{tf}.threshold")
            stl = c.string(t["stl"], f"{tf}.stl")
            _check_stl(c, f"{tf}.stl", stl, common["signal"], common["op"], threshold,
                       common["gate"], common["binary"])
            aliases = c.str_list(t.get("aliases"), f"{tf}.aliases")
            claim(sid, f"{tf}.spec_id", fam)
            for a in aliases:
                claim(a, f"{tf}.aliases", fam)
            built.append(Spec(
                spec_id=sid, tier=t["tier"], threshold=threshold, stl=stl, aliases=aliases,
                vsi_severe=_severe(c, t.get("vsi_severe"), f"{tf}.vsi_severe", threshold,
                                   common["binary"], True),
                source=c.string(t.get("source"), f"{tf}.source", optional=True) or "",
                severe_anchor=c.string(t.get("severe_anchor"), f"{tf}.severe_anchor", optional=True) or "",
                **common))
        mains = [s for s in built if s.tier == "safe"]
        if len(mains) != 1:
            c.fail(f"{f}.tiers", f"expected exactly one tier 'safe' (the main threshold), found {len(mains)}")
        main = mains[0]
        specs[fam] = Spec(**{**main.__dict__, "alternates": tuple(s for s in built if s is not main)})
    if not specs:
        c.fail("families", "no constraint family declared")
    for fam in specs:
        if fam in seen_ids and seen_ids[fam][1] != fam:
            c.fail(seen_ids[fam][0], f"spec id {fam!r} collides with the name of another family")

    diagnostics: list[Spec] = []
    diags = data.get("diagnostics") or []
    if not isinstance(diags, list):
        c.fail("diagnostics", "expected a list")
    for i, d in enumerate(diags):
        f = f"diagnostics[{i}]"
        d = c.mapping(d, f)
        c.keys(d, f, _DIAG_KEYS, required=_DIAG_REQUIRED)
        sid = c.string(d["spec_id"], f"{f}.spec_id")
        f = f"diagnostics.{sid}"
        fam = c.string(d["family"], f"{f}.family")
        claim(sid, f"{f}.spec_id", fam)
        if fam in specs:
            c.fail(f"{f}.family", f"diagnostic family {fam!r} collides with a scored family")
        op, signal = _op(c, d["op"], f"{f}.op"), c.string(d["signal"], f"{f}.signal")
        threshold = c.number(d["threshold"], f"{f}.threshold")
        binary = _binary(c, d.get("binary"), f"{f}.binary")
        gate = c.string(d.get("gate"), f"{f}.gate", optional=True)
        stl = c.string(d["stl"], f"{f}.stl")
        _check_stl(c, f"{f}.stl", stl, signal, op, threshold, gate, binary)
        diagnostics.append(Spec(
            spec_id=sid, family=fam, tier="report_only",
            axis=axis(d["axis"], f"{f}.axis") if d.get("axis") is not None else "",
            signal=signal, op=op, threshold=threshold, unit=c.string(d["unit"], f"{f}.unit"), stl=stl,
            requires_all=c.tags(d["requires_all"], f"{f}.requires_all", vocab),
            invalid_if_any=c.tags(d["invalid_if_any"], f"{f}.invalid_if_any", vocab),
            vsi_severe=_severe(c, d.get("vsi_severe"), f"{f}.vsi_severe", threshold, binary, False),
            binary=binary, gate=gate, source=c.string(d.get("source"), f"{f}.source", optional=True) or ""))

    presets: dict[str, Preset] = {}
    for name, p in c.mapping(data.get("presets"), "presets", optional=True).items():
        f = f"presets.{name}"
        p = c.mapping(p, f)
        c.keys(p, f, ("label", "overrides"))
        overrides = {}
        for fam, value in c.mapping(p.get("overrides"), f"{f}.overrides", optional=True).items():
            of = f"{f}.overrides.{fam}"
            if fam not in specs:
                c.fail(of, f"unknown constraint family {fam!r}; expected one of {', '.join(specs)}")
            overrides[fam] = check_override(specs[fam], value, lambda msg, of=of: c.fail(of, msg))
        presets[name] = Preset(name, c.string(p.get("label"), f"{f}.label", optional=True) or name,
                               FrozenMap(overrides))
    return tuple(specs), specs, tuple(diagnostics), presets


def check_override(spec: Spec, value: Any, fail) -> float:
    """Validate one threshold override for ``spec`` (shared by presets and what-if)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        fail(f"expected a finite number, got {value!r}")
    if spec.binary:
        fail(f"{spec.family} is a binary hard-stop predicate; its threshold cannot be overridden")
    if value == 0 or (spec.threshold != 0 and (value > 0) != (spec.threshold > 0)):
        fail(f"threshold {value!r} for {spec.family} must be non-zero with the sign of the main "
             f"threshold {spec.threshold!r} ({spec.unit})")
    return float(value)


