"""What a report's numbers were made with: the rollout protocol of the episodes, the force
and torque sampling of the scored signals, and the readings of the paper's ambiguities.

Each is a short caption sentence and a metrics.json field. Sampling comes from the run
store's `force_sampling` (what the signals held) and `force_sampling_option` (the
`safevla score --force-sampling` option) columns (docs/scoring.md, "Force sampling").
"""

from __future__ import annotations

import pandas as pd

from scoring.report.readings import Reading

NOT_RECORDED = "not recorded"
# store key -> words in a caption
SAMPLING_WORDS = {
    "substep_peak": "substep peaks",
    "control": "control-step samples",
    "control (no peaks recorded)": "control-step samples (the records hold no substep peaks)",
    NOT_RECORDED: "not recorded",
}


def _counted(label: str, counts: dict[str, int], words: dict[str, str] | None = None) -> str:
    """"Label: x." for one kind, "Label: x (n episodes), y (m episodes)." for several; "" for none."""
    if not counts:
        return ""
    said = {k: (words or {}).get(k, k) for k in counts}
    if len(counts) == 1:
        return f"{label}: {said[next(iter(counts))]}."
    return f"{label}: " + ", ".join(f"{said[k]} ({v} episodes)" for k, v in counts.items()) + "."


def _count_by(episodes: pd.DataFrame, column: str, qualifier: str, key) -> dict[str, int]:
    """Episodes per `key(value, qualifier value)` of two store columns; "not recorded" for rows
    (or a store) without `column`, the qualifier None where its column is absent."""
    if episodes.empty:
        return {}
    if column not in episodes.columns:
        return {NOT_RECORDED: int(len(episodes))}
    other = (episodes[qualifier] if qualifier in episodes.columns
             else pd.Series([None] * len(episodes), index=episodes.index))
    counts: dict[str, int] = {}
    for value, extra in zip(episodes[column].to_numpy(object), other.to_numpy(object)):
        k = key(value, extra) if isinstance(value, str) else NOT_RECORDED
        counts[k] = counts.get(k, 0) + 1
    return counts


def protocol_counts(episodes: pd.DataFrame) -> dict[str, int]:
    """Episodes per rollout protocol ("openpi", "openpi (overridden)", "not recorded")."""
    return _count_by(episodes, "protocol", "protocol_native",
                     lambda name, native: name if native is None or bool(native) else f"{name} (overridden)")


def protocol_note(episodes: pd.DataFrame) -> str:
    """The caption's sentence on the rollout protocols behind the table (docs/libero.md, "Protocols")."""
    counts = protocol_counts(episodes)
    return _counted("Rollout protocol" if len(counts) == 1 else "Rollout protocols", counts)


def sampling_counts(episodes: pd.DataFrame) -> dict[str, int]:
    """Episodes per force/torque sampling: "substep_peak", "control" (scored under
    `--force-sampling control`), "control (no peaks recorded)" (scored under the peak
    option from records that hold only samples) or "not recorded" (a store without the columns)."""
    return _count_by(episodes, "force_sampling", "force_sampling_option",
                     lambda held, chosen: "control (no peaks recorded)" if held == "control" and chosen == "peak"
                     else held)


def sampling_note(episodes: pd.DataFrame) -> str:
    """The caption's sentence on the force and torque sampling behind the table."""
    return _counted("Force and torque sampling", sampling_counts(episodes), SAMPLING_WORDS)


def reading_note(reading: Reading) -> str:
    """The caption's sentence on the readings of the paper's ambiguities in force."""
    return f"Applicability preset: {reading.applicability}; VSI saturation: {reading.vsi_saturation}."


def made_with(episodes: pd.DataFrame, reading: Reading) -> str:
    """Protocol, sampling and reading sentences, space-separated."""
    return " ".join(s for s in (protocol_note(episodes), sampling_note(episodes), reading_note(reading)) if s)
