"""scoring.stats.compare and scoring.cli.compare: pairing, paired tables, Holm, discordant lists, CLI."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from scoring.cli.compare import main
from scoring.errors import RecordError, SafeVLAError
from scoring.stats.compare import OVERALL, compare_models, discordant_episodes, pair_episodes
from scoring.stats.metrics import aggregate
from scoring.stats.ranking import paired_bootstrap
from scoring.store.write import EPISODE_COLUMNS, SPEC_COLUMNS, load_store

DEMO_STORE = Path(__file__).resolve().parent.parent / "assets" / "demo" / "store"
SUITES = ("libero-spatial", "libero-object", "libero-goal", "libero-10")


def paired_episodes(n_keys, models, *, suites=SUITES, seed=0, sr=None, safety=None):
    """Synthetic episodes on shared (suite, task, init state, seed) keys for every model.

    A latent difficulty per key is shared by the models, so their outcomes correlate as real
    paired rollouts do; model j has success rate ~sr[j] and safety ~safety[j].
    """
    rng = np.random.default_rng(seed)
    sr = sr or [0.9 - 0.05 * j for j in range(len(models))]
    safety = safety or [0.75 + 0.05 * j for j in range(len(models))]
    i = np.arange(n_keys)
    suite = np.array(suites)[i % len(suites)]
    task = np.char.add("task_", ((i // len(suites)) % 10).astype(str))
    init = (i // (len(suites) * 10)) % 50
    ep_seed = i // (len(suites) * 10 * 50)
    latent = rng.random((n_keys, 2))
    frames = []
    for j, name in enumerate(models):
        u = 0.6 * latent + 0.4 * rng.random((n_keys, 2))
        success = u[:, 0] < sr[j]
        safe = u[:, 1] < safety[j]
        vsi = np.where(safe, 0.0, np.clip(rng.beta(2, 5, n_keys) * (1 + 0.1 * j), 0, 1))
        frames.append(pd.DataFrame({
            "episode_id": [f"{s}/{t}/{name}/{k}" for s, t, k in zip(suite, task, i)], "model": name,
            "benchmark": suite, "suite": suite, "task_id": task, "seed": ep_seed, "init_state": init,
            "success": success, "safe": safe, "sbu": success & ~safe, "vsi": vsi,
            "worst_spec": np.where(safe, None, "non_target_max_disp"),
            "violating_step": np.where(safe, -1, rng.integers(0, 300, n_keys))}))
    return pd.concat(frames, ignore_index=True)


def from_tables(**tables):
    """Two models 'A' and 'B' whose paired outcomes per metric are the given 2x2 tables
    (both, only A, only B, neither); one key per row, with one suite."""
    n = sum(next(iter(tables.values())))
    rows = {m: {} for m in "AB"}
    for col, (both, b, c, d) in tables.items():
        rows["A"][col] = [1] * both + [1] * b + [0] * c + [0] * d
        rows["B"][col] = [1] * both + [0] * b + [1] * c + [0] * d
    frames = []
    for m in "AB":
        safe = np.array(rows[m].get("safe", [1] * n), bool)
        success = np.array(rows[m].get("success", [1] * n), bool)
        frames.append(pd.DataFrame({"episode_id": [f"{m}-{k}" for k in range(n)], "model": m, "benchmark": "libero-10",
                                    "suite": "libero-10", "task_id": "task_0", "seed": 0, "init_state": np.arange(n),
                                    "success": success, "safe": safe, "sbu": success & ~safe,
                                    "vsi": np.where(safe, 0.0, 0.4)}))
    return pd.concat(frames, ignore_index=True)


def write_store(path, episodes):
    """A minimal run store (manifest + Parquet tables) around an episodes table."""
    path.mkdir(parents=True)
    eps = episodes.copy()
    for col in EPISODE_COLUMNS:
        if col not in eps:
            eps[col] = None
    table = pa.Table.from_pandas(eps[list(EPISODE_COLUMNS)], schema=pa.schema(EPISODE_COLUMNS), preserve_index=False)
    pq.write_table(table, path / "episodes.parquet")
    pq.write_table(pa.table({c: pa.array([], type=t) for c, t in SPEC_COLUMNS.items()}), path / "spec_results.parquet")
    (path / "manifest.json").write_text(json.dumps({"registry_hash": "test"}))
    return path


@pytest.mark.parametrize("table", [(5, 0, 0, 7), (0, 10, 0, 0), (2, 0, 9, 1), (59, 6, 16, 80), (30, 12, 11, 7)])
def test_paired_tables_and_mcnemar_equal_statsmodels(table):
    cmp = compare_models(from_tables(safe=table), ["A", "B"], n_resamples=200)
    row = cmp.pairs[(cmp.pairs["group"] == OVERALL) & (cmp.pairs["metric"] == "safety")].iloc[0]
    assert (row["both"], row["only_a"], row["only_b"], row["neither"]) == table
    expected = mcnemar(np.array([[table[0], table[1]], [table[2], table[3]]]), exact=True).pvalue
    assert row["p_value"] == pytest.approx(expected, rel=1e-12, abs=0)
    assert row["p_holm"] == row["p_value"]  # one pair: nothing to correct
    assert row["diff"] == pytest.approx((table[1] - table[2]) / sum(table))


def test_sbu_table_follows_success_and_safety():
    eps = from_tables(success=(6, 2, 1, 1), safe=(4, 1, 3, 2))
    cmp = compare_models(eps, ["A", "B"], n_resamples=200)
    row = cmp.pairs[(cmp.pairs["group"] == OVERALL) & (cmp.pairs["metric"] == "sbu")].iloc[0]
    a = eps[eps.model == "A"]["sbu"].to_numpy()
    b = eps[eps.model == "B"]["sbu"].to_numpy()
    assert (row["only_a"], row["only_b"]) == (int((a & ~b).sum()), int((~a & b).sum()))


def test_holm_over_three_and_four_models_equals_statsmodels():
    models = ["m1", "m2", "m3", "m4"]
    cmp = compare_models(paired_episodes(600, models, seed=3), models, n_resamples=500)
    assert set(cmp.groups) == {OVERALL, *SUITES}
    for (g, k), cell in cmp.pairs.groupby(["group", "metric"]):
        assert len(cell) == 6
        assert np.allclose(cell["p_holm"], multipletests(cell["p_value"], method="holm")[1], rtol=1e-12, atol=0)
        assert (cell["significant"] == (cell["p_holm"] < 0.05)).all()
    three = compare_models(paired_episodes(300, models[:3], seed=4), models[:3], by=None, n_resamples=300)
    assert three.groups == (OVERALL,)
    for _, cell in three.pairs.groupby("metric"):
        assert np.allclose(cell["p_holm"], multipletests(cell["p_value"], method="holm")[1])


def test_vsi_pair_agrees_with_paired_bootstrap():
    eps = paired_episodes(400, ["a", "b"], seed=2)
    cmp = compare_models(eps, ["a", "b"], n_resamples=10_000, seed=0)
    pairing = cmp.pairing
    v = pairing.values("vsi")
    for group in (OVERALL, "libero-10"):
        rows = np.ones(len(v), bool) if group == OVERALL else (pairing.keys["suite"] == group).to_numpy()
        ref = paired_bootstrap(v[rows, 0], v[rows, 1], strata=pairing.keys["suite"].to_numpy()[rows], seed=9)
        row = cmp.pairs[(cmp.pairs["group"] == group) & (cmp.pairs["metric"] == "vsi")].iloc[0]
        width = ref.diff_hi - ref.diff_lo
        assert row["diff"] == pytest.approx(ref.diff)
        assert abs(row["diff_lo"] - ref.diff_lo) < 0.05 * width and abs(row["diff_hi"] - ref.diff_hi) < 0.05 * width
    again = compare_models(eps, ["a", "b"], n_resamples=10_000, seed=0)
    assert again.pairs.equals(cmp.pairs)  # seeded: reproducible to the bit


def test_confidence_level_sets_every_interval():
    eps = paired_episodes(200, ["a", "b"])
    wide = compare_models(eps, ["a", "b"], n_resamples=1000)
    narrow = compare_models(eps, ["a", "b"], n_resamples=1000, confidence=0.8)
    assert ((narrow.rates["hi"] - narrow.rates["lo"]) < (wide.rates["hi"] - wide.rates["lo"])).all()
    assert ((narrow.pairs["diff_hi"] - narrow.pairs["diff_lo"]) < (wide.pairs["diff_hi"] - wide.pairs["diff_lo"])).all()
    with pytest.raises(SafeVLAError, match="confidence"):
        compare_models(eps, ["a", "b"], confidence=95)
    with pytest.raises(SafeVLAError, match="alpha"):
        compare_models(eps, ["a", "b"], alpha=0)


def test_rank_flip_between_sr_and_safety():
    models = ["fast", "middle", "careful"]
    eps = paired_episodes(2000, models, seed=1, sr=[0.95, 0.85, 0.70], safety=[0.60, 0.75, 0.95])
    cmp = compare_models(eps, models, by=None, n_resamples=500)
    agree = cmp.agreement.set_index("group").loc[OVERALL]
    assert agree["tau"] == pytest.approx(-1.0) and agree["n_flips"] == 3 and agree["n_significant_flips"] == 3
    assert set(zip(cmp.flips["model_1"], cmp.flips["model_2"])) == {("fast", "middle"), ("fast", "careful"),
                                                                    ("middle", "careful")}
    ranks = cmp.ranking[cmp.ranking["group"] == OVERALL].set_index(["metric", "model"])
    assert ranks.loc[("sr", "fast"), "rank"] == 1 and ranks.loc[("safety", "careful"), "rank"] == 1
    assert ranks.loc[("sr", "fast"), "tier"] == 1 and ranks.loc[("sr", "careful"), "tier"] == 3
    assert ranks.loc[("vsi", "careful"), "rank"] == 1  # lower VSI is better


def test_identical_models_share_tier_one():
    eps = paired_episodes(200, ["a"], seed=0)
    twin = eps.assign(model="b", episode_id=eps["episode_id"] + "-twin")
    cmp = compare_models(pd.concat([eps, twin]), ["a", "b"], n_resamples=300)
    assert (cmp.ranking["tier"] == 1).all()
    assert (cmp.pairs["p_value"] == 1.0).all() and (cmp.pairs["diff"] == 0).all()
    assert cmp.agreement["tau"].isna().all()  # one model per rank cannot be correlated


def test_unpaired_keys_are_reported_not_dropped():
    eps = paired_episodes(40, ["a", "b", "c"], seed=0)
    gone_b = eps.index[(eps.model == "b")][3]
    gone_c = eps.index[(eps.model == "c")][7]
    extra = eps[eps.model == "a"].iloc[[0]].assign(init_state=999, episode_id="extra-a")
    eps = pd.concat([eps.drop([gone_b, gone_c]), extra], ignore_index=True)
    cmp = compare_models(eps, ["a", "b", "c"], n_resamples=200)
    un = cmp.unpaired
    assert len(un) == 3 and len(cmp.pairing.keys) == 38
    assert sorted(un["missing"]) == ["b", "b, c", "c"]
    assert "extra-a" in set(un["episode_ids"])
    assert any("3 key(s) are not shared" in note for note in cmp.notes)
    assert (cmp.pairs["n"][cmp.pairs["group"] == OVERALL] == 38).all()


def test_duplicate_keys_name_the_key_and_episodes():
    eps = paired_episodes(8, ["a", "b"], seed=0)
    dup = eps.iloc[[2]].assign(episode_id="dup-episode")
    with pytest.raises(RecordError) as err:
        pair_episodes(pd.concat([eps, dup]), ["a", "b"])
    msg = str(err.value)
    assert "model 'a' has 2 episodes on key" in msg and "dup-episode" in msg and eps["episode_id"].iloc[2] in msg
    assert "task_id='task_0'" in msg


def test_missing_key_columns_are_dropped_and_said():
    eps = paired_episodes(12, ["a", "b"], seed=0).assign(seed=None)
    eps["seed"] = eps["seed"].astype(object)
    pairing = pair_episodes(eps, ["a", "b"])
    assert pairing.key_columns == ("suite", "task_id", "init_state")
    assert any("seed is missing for every episode" in n for n in pairing.notes)
    part = paired_episodes(12, ["a", "b"], seed=0)
    part["init_state"] = part["init_state"].astype(float)
    part.loc[part["task_id"] == "task_1", "init_state"] = np.nan
    pairing = pair_episodes(part, ["a", "b"])
    assert pairing.key_columns == ("suite", "task_id", "init_state", "seed") and len(pairing.keys) == 12
    assert any("init_state is null in" in n for n in pairing.notes)
    no_keys = paired_episodes(80, ["a", "b"]).assign(seed=None, init_state=None)
    with pytest.raises(RecordError, match="has 2 episodes on key"):  # (suite, task) alone is not unique here
        pair_episodes(no_keys, ["a", "b"])


def test_suite_falls_back_to_benchmark():
    eps = paired_episodes(8, ["a", "b"]).assign(suite=None)
    pairing = pair_episodes(eps, ["a", "b"])
    assert set(pairing.keys["suite"]) == set(SUITES)


def test_bad_model_lists():
    eps = paired_episodes(8, ["a", "b", "c"])
    with pytest.raises(SafeVLAError, match="unknown model 'z'; models in the store: a, b, c"):
        compare_models(eps, ["a", "z"])
    with pytest.raises(SafeVLAError, match="at least two models, got 1; models in the store: a, b, c"):
        compare_models(eps, ["a"])
    with pytest.raises(SafeVLAError, match="named once"):
        compare_models(eps, ["a", "a"])
    with pytest.raises(SafeVLAError, match="list of model names"):
        compare_models(eps, "ab")
    with pytest.raises(SafeVLAError, match="valid choices"):
        compare_models(eps, ["a", "b"], by="task")
    other = eps.copy()
    other.loc[other.model == "b", "init_state"] += 1000
    with pytest.raises(SafeVLAError, match="no .* key is shared by all of a, b"):
        compare_models(other, ["a", "b"])
    bad = eps.copy()
    bad.loc[3, "vsi"] = np.nan
    with pytest.raises(RecordError, match="vsi"):
        compare_models(bad, ["a", "b", "c"])


def test_discordant_episodes_list_both_sides():
    eps = paired_episodes(200, ["a", "b"], seed=6)
    cmp = compare_models(eps, ["a", "b"], n_resamples=200)
    d = discordant_episodes(cmp.pairing, "a", "b")
    row = cmp.pairs[(cmp.pairs["group"] == OVERALL) & (cmp.pairs["metric"] == "safety")].iloc[0]
    assert (d["which"] == "a only").sum() == row["only_a"] and (d["which"] == "b only").sum() == row["only_b"]
    assert (d["safe_a"] != d["safe_b"]).all()
    assert ((d["which"] == "a only") == d["safe_a"]).all()
    unsafe_side_vsi = np.where(d["safe_a"], d["vsi_b"], d["vsi_a"])
    assert (unsafe_side_vsi > 0).all()
    by_id = eps.set_index("episode_id")
    assert (by_id.loc[d["episode_id_b"], "model"] == "b").all()
    assert (by_id.loc[d["episode_id_a"], "init_state"].to_numpy() == d["init_state"].to_numpy()).all()
    direct = discordant_episodes(eps, "b", "a", metric="sr")  # from an episodes table, other order
    assert len(direct) == row["n"] - cmp.pairs.query("group == @OVERALL and metric == 'sr'").iloc[0][
        ["both", "neither"]].sum()
    with pytest.raises(SafeVLAError, match="valid choices: sr, safety, sbu"):
        discordant_episodes(cmp.pairing, "a", "b", metric="vsi")
    with pytest.raises(SafeVLAError, match="models in this comparison: a, b"):
        discordant_episodes(cmp.pairing, "a", "x")


def check_against_records(episodes, cmp):
    """Recomputes each pair's b and c and each model's rates straight from `episodes`."""
    eps = episodes[episodes["model"].isin(cmp.models)].copy()
    eps["suite"] = eps["suite"].fillna(eps["benchmark"])
    keys = list(cmp.pairing.key_columns)
    for metric, col in (("sr", "success"), ("safety", "safe"), ("sbu", "sbu")):
        for i, a in enumerate(cmp.models):
            for b in cmp.models[i + 1:]:
                merged = eps[eps.model == a].merge(eps[eps.model == b], on=keys, suffixes=("_a", "_b"))
                x, y = merged[f"{col}_a"].astype(bool), merged[f"{col}_b"].astype(bool)
                row = cmp.pairs[(cmp.pairs["group"] == OVERALL) & (cmp.pairs["metric"] == metric)
                                & (cmp.pairs["model_a"] == a) & (cmp.pairs["model_b"] == b)].iloc[0]
                if cmp.unpaired.empty:
                    assert row["n"] == len(merged)
                    assert (row["only_a"], row["only_b"]) == (int((x & ~y).sum()), int((~x & y).sum()))
                assert row["only_a"] <= int((x & ~y).sum()) and row["only_b"] <= int((~x & y).sum())
    if cmp.unpaired.empty:
        agg = aggregate(eps, by=("model",), ci=False).set_index("model")
        rates = cmp.rates[cmp.rates["group"] == OVERALL].set_index(["metric", "model"])["value"]
        for m in cmp.models:
            for metric in ("sr", "safety", "sbu", "vsi"):
                assert rates[metric, m] == pytest.approx(agg.loc[m, metric])


def test_store_round_trip_agrees_with_records(tmp_path):
    store = write_store(tmp_path / "store", paired_episodes(120, ["careful", "hasty", "sloppy"], seed=8))
    _, episodes, _ = load_store(store)
    cmp = compare_models(episodes, ["careful", "hasty", "sloppy"], n_resamples=500)
    check_against_records(episodes, cmp)


@pytest.mark.skipif(not DEMO_STORE.is_dir(), reason=f"demo store {DEMO_STORE} not recorded yet "
                                                    f"(scripted LIBERO profiles careful/hasty/sloppy)")
def test_demo_store_profiles_agree_with_their_records():
    _, episodes, _ = load_store(DEMO_STORE)
    models = sorted(episodes["model"].dropna().unique())
    if len(models) < 2:
        pytest.skip(f"demo store has {len(models)} model(s): {models}; a comparison needs two")
    cmp = compare_models(episodes, models, n_resamples=2000)
    check_against_records(episodes, cmp)
    for i, a in enumerate(models):
        for b in models[i + 1:]:
            d = discordant_episodes(cmp.pairing, a, b)
            row = cmp.pairs[(cmp.pairs["group"] == OVERALL) & (cmp.pairs["metric"] == "safety")
                            & (cmp.pairs["model_a"] == a) & (cmp.pairs["model_b"] == b)].iloc[0]
            assert len(d) == row["only_a"] + row["only_b"]


# ------------------------------------------------------------------------------------ CLI

def run(*argv):
    return subprocess.run([sys.executable, "-m", "scoring.cli.compare", *map(str, argv)],
                          capture_output=True, text=True)


def test_cli_writes_tables(tmp_path, capsys):
    store = write_store(tmp_path / "store", paired_episodes(80, ["a", "b", "c"], seed=0))
    assert main(["compare", str(store), "--models", "a", "b", "c", "--out", str(tmp_path / "out"),
                 "--resamples", "500"]) == 0
    out = capsys.readouterr().out
    assert "compared a, b, c on 80 shared keys (paired on suite, task_id, init_state, seed); 0 unpaired" in out
    names = {p.name for p in (tmp_path / "out").iterdir()}
    for table in ("compare_pairs", "compare_ranking", "compare_rank_agreement", "compare_flips"):
        assert {f"{table}.csv", f"{table}.md", f"{table}.tex"} <= names
    assert {"compare_discordant.csv", "compare_unpaired.csv"} <= names
    pairs = pd.read_csv(tmp_path / "out" / "compare_pairs.csv")
    assert len(pairs) == 5 * 4 * 3  # groups x metrics x pairs
    assert "\\begin{tabular}" in (tmp_path / "out" / "compare_ranking.tex").read_text()
    assert main(["compare", str(store), "--models", "a", "b", "--by", "none", "--resamples", "200"]) == 0
    pairs = pd.read_csv(store / "compare" / "compare_pairs.csv")
    assert set(pairs["group"]) == {OVERALL} and len(pairs) == 4


@pytest.mark.parametrize("argv, expected", [
    (["--models", "a", "zz"], "unknown model 'zz'; models in the store: a, b"),
    (["--models", "a"], "at least two models, got 1; models in the store: a, b"),
    ([], "at least two models, got 0"),
    (["--models", "a", "b", "--by", "task"], "valid choices: suite, none"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, expected):
    store = write_store(tmp_path / "store", paired_episodes(8, ["a", "b"]))
    assert main(["compare", str(store), *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and expected in err and err.startswith("safevla compare: ")


def test_cli_no_shared_keys_and_missing_store(tmp_path, capsys):
    eps = paired_episodes(8, ["a", "b"])
    eps.loc[eps.model == "b", "seed"] += 7
    store = write_store(tmp_path / "store", eps)
    out = run("compare", store, "--models", "a", "b")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "is shared by all of a, b" in out.stderr
    assert main(["compare", str(tmp_path / "nowhere"), "--models", "a", "b"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_cli_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["compare", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "usage: safevla compare" in out and "--models" in out


def test_registered_in_main_cli(tmp_path, capsys):
    from scoring.cli.main import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    if "compare" not in sub.choices:
        pytest.skip("scoring/cli/main.py does not register `compare` yet (add_compare_parser is for the CLI owner)")
    from scoring.cli.main import main as safevla
    store = write_store(tmp_path / "store", paired_episodes(8, ["a", "b"]))
    assert safevla(["compare", str(store), "--models", "a", "b", "--resamples", "100"]) == 0
    assert safevla(["compare", str(store), "--models", "a", "q"]) == 2
    assert "unknown model 'q'" in capsys.readouterr().err
