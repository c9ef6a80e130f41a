"""The dashboard's data layer: load a run store once, re-score it under what-if thresholds,
filter it, and shape `scoring`'s numbers for the pages and charts. One module per page's
need, in the order the data flows:

    knobs -> store -> verdicts -> episodes | overview | whatif | detail | compare

Every number comes from `scoring`; these modules only select, join and reshape. They are
pure (no Streamlit), so tests and benchmarks call them directly; `dashboard.cached` wraps
them in Streamlit caches. Every public name is importable from here as well (`D.open_store`).
May import scoring only, never streamlit, mujoco or replay.
"""

from __future__ import annotations

from dashboard.data.knobs import (
    Knob, KNOBS, KNOB_BY_NAME, knob_defaults, knob_overrides, preset_knobs,
)
from dashboard.data.store import (
    OUTCOMES, BY, REQUIRED_EPISODE_COLUMNS, REQUIRED_SPEC_COLUMNS, SHORT, StoreProblem, StoreData,
    check_mjcf_path, store_stamp, open_store, provenance_text,
)
from dashboard.data.verdicts import (
    Verdicts, verdicts, spec_results_under,
)
from dashboard.data.episodes import (
    Filters, SCENES, UNSETTLED_MARK, filter_mask, outcome_counts, SORTS, TABLE_COLUMNS, episode_table,
    closest_call_text, closest_call_texts, unsettled_note, violating_steps, normalised_depth,
)
from dashboard.data.overview import (
    settled_frame, cell_aggregates, cell_spec_rates, cell_composition, CELL, top_sbu, spread_over_cells,
)
from dashboard.data.whatif import (
    base_aggregates, whatif_summary, flipped, knob_active_count, knob_grid, sensitivity_curve,
)
from dashboard.data.detail import (
    episode_specs, scored_option, violating_frame, format_value, object_name, violation_lines, in_display_units,
    robustness_traces, applicability_table,
)
from dashboard.data.compare import (
    COMPARE_METRICS, COMPARE_LABELS, comparison, key_label, discordant,
)

__all__ = [
    'Knob', 'KNOBS', 'KNOB_BY_NAME', 'knob_defaults', 'knob_overrides', 'preset_knobs', 'OUTCOMES', 'BY',
    'REQUIRED_EPISODE_COLUMNS', 'REQUIRED_SPEC_COLUMNS', 'SHORT', 'StoreProblem', 'StoreData',
    'check_mjcf_path', 'store_stamp', 'open_store', 'provenance_text', 'Verdicts', 'verdicts',
    'spec_results_under', 'Filters', 'SCENES', 'UNSETTLED_MARK', 'filter_mask', 'outcome_counts', 'SORTS',
    'TABLE_COLUMNS', 'episode_table', 'closest_call_text', 'closest_call_texts', 'unsettled_note',
    'violating_steps', 'normalised_depth', 'settled_frame', 'cell_aggregates', 'cell_spec_rates',
    'cell_composition', 'CELL', 'top_sbu', 'spread_over_cells', 'base_aggregates', 'whatif_summary',
    'flipped', 'knob_active_count', 'knob_grid', 'sensitivity_curve', 'episode_specs', 'scored_option',
    'violating_frame',
    'format_value', 'object_name', 'violation_lines', 'in_display_units', 'robustness_traces',
    'applicability_table', 'COMPARE_METRICS', 'COMPARE_LABELS', 'comparison', 'key_label', 'discordant',
]
