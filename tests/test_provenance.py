"""scoring.report.provenance: the force/torque sampling and the reading behind every number."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scoring.records.io import save_record
from scoring.records.synthetic import make_record
from scoring.report.provenance import made_with, reading_note, sampling_counts, sampling_note
from scoring.report.readings import Reading
from scoring.store.write import load_store, score_archive


@pytest.mark.parametrize("held, option, key, words", [
    ("substep_peak", "peak", "substep_peak", "substep peaks"),
    ("control", "control", "control", "control-step samples"),
    ("control", "peak", "control (no peaks recorded)", "control-step samples (the records hold no substep peaks)"),
    (None, None, "not recorded", "not recorded"),
])
def test_each_store_combination_has_its_words(held, option, key, words):
    eps = pd.DataFrame({"force_sampling": [held] * 3, "force_sampling_option": [option] * 3})
    assert sampling_counts(eps) == {key: 3}
    assert sampling_note(eps) == f"Force and torque sampling: {words}."


def test_mixed_stores_count_each_sampling_and_old_stores_say_not_recorded():
    eps = pd.DataFrame({"force_sampling": ["substep_peak", "substep_peak", "control"],
                        "force_sampling_option": ["peak", "peak", "peak"]})
    assert sampling_note(eps) == ("Force and torque sampling: substep peaks (2 episodes), control-step samples "
                                  "(the records hold no substep peaks) (1 episodes).")
    assert sampling_counts(pd.DataFrame({"episode_id": ["a"]})) == {"not recorded": 1}
    assert sampling_counts(pd.DataFrame({"force_sampling": []})) == {} and sampling_note(pd.DataFrame()) == ""


def test_the_reading_sentence_names_both_choices():
    assert reading_note(Reading()) == "Applicability preset: appendix-d; VSI saturation: eq1."
    eps = pd.DataFrame({"force_sampling": ["substep_peak"], "force_sampling_option": ["peak"]})
    assert made_with(eps, Reading("paper-tables", "anchor")) == (
        "Rollout protocol: not recorded. Force and torque sampling: substep peaks. "
        "Applicability preset: paper-tables; VSI saturation: anchor.")
    eps["protocol"], eps["protocol_native"] = ["openpi"], [True]
    assert made_with(eps, Reading()).startswith("Rollout protocol: openpi. Force and torque sampling")


@pytest.mark.parametrize("option, key", [("peak", "substep_peak"), ("control", "control")])
def test_the_score_option_reaches_the_counts(tmp_path, option, key):
    rng = np.random.default_rng(3)
    for i in range(2):
        rec = make_record(rng, episode_id=f"ep_{i}", n_steps=30, contacts_per_step=4, substep_peaks=True)
        save_record(rec, tmp_path / "arch" / f"ep_{i}.npz")
    score_archive([tmp_path / "arch"], tmp_path / "store", progress=False, force_sampling=option)
    _, eps, _ = load_store(tmp_path / "store")
    assert sampling_counts(eps) == {key: 2}
