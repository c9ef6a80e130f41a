"""The Compare page through `streamlit.testing.v1.AppTest`: paired tables from
`scoring.stats.compare`, model choice, the discordant list against `discordant_episodes`, deep
links, and the side-by-side replay (render tests need EGL)."""

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("statsmodels")
from streamlit.testing.v1 import AppTest  # noqa: E402

from scoring.stats.compare import compare_models, discordant_episodes  # noqa: E402
from dashboard_helpers import build_store, metric, ok  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "dashboard" / "app.py")
DEMO = ROOT / "assets" / "demo" / "store"
MODELS = ["policy-a", "policy-b", "policy-c", "policy-d"]


def make_store(out: Path, n: int, *, paired: bool) -> Path:
    store = build_store(out, n, n_steps=40, contacts_per_step=4, renderable=True)
    if paired:
        # synthetic records draw a seed each; give every model the same seed per init state, as a benchmark run does
        eps = pd.read_parquet(store / "episodes.parquet")
        eps["seed"] = eps["init_state"]
        eps.to_parquet(store / "episodes.parquet", index=False)
    return store


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return make_store(tmp_path_factory.mktemp("cmp") / "store", 48, paired=True)


@pytest.fixture(scope="module")
def eps(store) -> pd.DataFrame:
    return pd.read_parquet(store / "episodes.parquet")


@pytest.fixture(autouse=True)
def _no_prewarm(monkeypatch):
    monkeypatch.setenv("SAFEVLA_NO_PREWARM", "1")


def app(store, **params) -> AppTest:
    os.environ["SAFEVLA_STORES"] = str(store)  # the dashboard opens a linked store only if allowed
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["store"] = str(store)
    at.query_params["page"] = "compare"
    for k, v in params.items():
        at.query_params[k] = v
    return at.run()




def qp(at: AppTest, key: str) -> str | None:
    v = at.query_params.get(key)
    return v if v is None or isinstance(v, str) else ",".join(v)


# AppTest does not expose a dataframe's key: tell the page's tables by a column of theirs
COLUMN_OF = {"cmp_pairs": "model A", "cmp_ranking": "SR rank", "cmp_table": "outcome held by"}


def table(at: AppTest, key: str) -> pd.DataFrame:
    hits = [d.value for d in at.dataframe if COLUMN_OF[key] in d.value.columns]
    assert hits, f"no dataframe {key!r}"
    return hits[0]


def key_of(row, cols=("suite", "task_id", "init_state", "seed")) -> str:
    return "/".join(str(row[c]) for c in cols)


# ----------------------------------------------------------------------------- tables

def test_page_renders_the_comparison(store, eps):
    at = ok(app(store))
    assert at.title[0].value == "Compare models"
    cmp = compare_models(eps, MODELS)
    assert metric(at, "Paired keys") == f"{len(cmp.pairing.keys):,}"
    assert metric(at, "Unpaired keys") == "0"
    tau = cmp.agreement.set_index("group").loc["overall", "tau"]
    assert metric(at, "Kendall tau (SR vs Safety)") == ("—" if np.isnan(tau) else f"{tau:.3f}")
    pairs = table(at, "cmp_pairs")
    assert len(pairs) == 4  # overall, the chosen pair (A = policy-a, B = policy-b) x SR, Safety, SBU, VSI
    assert set(pairs["model A"]) == {"policy-a"} and set(pairs["model B"]) == {"policy-b"}
    # each row carries its 2x2 table; the counts equal scoring's
    want = cmp.pairs[(cmp.pairs["group"] == "overall") & (cmp.pairs["metric"] == "safety")].iloc[0]
    got = pairs[pairs["metric"].str.startswith("Safety")].iloc[0]
    assert (int(got["b: only A"]), int(got["c: only B"])) == (int(want["only_a"]), int(want["only_b"]))
    ranking = table(at, "cmp_ranking")
    assert set(ranking["model"]) == {"policy-a", "policy-b"} and "Safety tier" in ranking.columns
    assert qp(at, "a") == "policy-a" and qp(at, "b") == "policy-b"


def test_choosing_models_changes_the_tables(store, eps):
    at = ok(app(store))
    assert len(table(at, "cmp_pairs")) == 4
    at.multiselect(key="w.cmp_models").set_value(["policy-b", "policy-d"]).run()
    ok(at)
    pairs = table(at, "cmp_pairs")
    assert len(pairs) == 4 and set(pairs["model A"]) == {"policy-b"} and set(pairs["model B"]) == {"policy-d"}
    assert len(table(at, "cmp_ranking")) == 2
    assert at.selectbox(key="w.cmp_a").value == "policy-b" and at.selectbox(key="w.cmp_b").value == "policy-d"
    assert qp(at, "models") == "policy-b,policy-d"
    # one model is not a comparison
    at.multiselect(key="w.cmp_models").set_value(["policy-b"]).run()
    assert not at.exception and any("at least two" in i.value for i in at.info)


@pytest.mark.parametrize("a,b,which", [("policy-a", "policy-b", "safety"), ("policy-a", "policy-d", "safety"),
                                       ("policy-c", "policy-b", "sr")])
def test_discordant_list_equals_scoring(store, eps, a, b, which):
    at = ok(app(store))
    at.selectbox(key="w.cmp_a").set_value(a).run()
    at.selectbox(key="w.cmp_b").set_value(b).run()
    at.selectbox(key="w.cmp_metric").set_value(which).run()
    ok(at)
    want = discordant_episodes(eps, a, b, metric=which)
    if want.empty:
        assert any("agree" in i.value for i in at.info)
        return
    got = table(at, "cmp_table")
    assert len(got) == len(want)
    assert got["key"].tolist() == [key_of(r) for _, r in want.iterrows()]
    assert (got["outcome held by"] == want["which"]).all()
    assert at.selectbox(key="w.cmp_key").options == [f"{k}   ·   {w}" for k, w in zip(want.apply(key_of, axis=1),
                                                                                        want["which"])]


def test_whatif_thresholds_rescore_the_comparison(store, eps):
    from dashboard import data as D

    at = ok(app(store, disp="100"))
    assert any("re-scored" in i.value for i in at.info)  # the thresholds banner
    data = D.open_store(store)
    v = D.verdicts(data, D.knob_overrides(data.registry, {**D.knob_defaults(data.registry), "disp": 100.0}))
    want = discordant_episodes(v.frame, "policy-a", "policy-b")
    assert len(table(at, "cmp_table")) == len(want)
    assert qp(at, "disp") == "100"


def verdicts_shown(at) -> list[str]:
    """The headline verdict and the three verdict captions under it."""
    head = [m.value.removeprefix("#### ") for m in at.markdown if m.value.startswith("#### ")]
    return head + [c.value for c in at.caption if "difference between" in c.value or " than " in c.value]


def test_verdict_sentence_equals_scoring(store, eps):
    from scoring.stats.compare_verdict import pair_result, verdict

    at = ok(app(store))
    cmp = compare_models(eps, MODELS)
    shown = verdicts_shown(at)
    assert shown[0] == verdict(pair_result(cmp.pairs, "policy-a", "policy-b", "safety"))
    for m in ("sr", "sbu", "vsi"):
        assert verdict(pair_result(cmp.pairs, "policy-a", "policy-b", m)) in shown
    # the verdict comes before the tables and the methods text after the verdict, before the tables
    def kind(e):
        if e.type == "markdown" and e.value.startswith("#### "):
            return "verdict"
        return "methods" if e.type == "markdown" and e.value.startswith("**Methods") else e.type

    kinds = [kind(e) for e in at.main if getattr(e, "type", None) in ("markdown", "dataframe")]
    assert kinds.index("verdict") < kinds.index("methods") < kinds.index("dataframe")
    # swapping A and B names the same better model with the same numbers
    at.selectbox(key="w.cmp_a").set_value("policy-b").run()
    at.selectbox(key="w.cmp_b").set_value("policy-a").run()
    ok(at)
    assert verdicts_shown(at)[0] == verdict(pair_result(cmp.pairs, "policy-b", "policy-a", "safety"))
    assert set(table(at, "cmp_pairs")["model A"]) == {"policy-a"}  # stored orientation, filtered to the pair


def test_forest_frame_matches_the_pairs(eps):
    from dashboard.forest import forest_chart, forest_frame

    cmp = compare_models(eps, MODELS, n_resamples=500)
    f = forest_frame(cmp.pairs, "policy-b", "policy-a", groups=cmp.groups)
    assert len(f) == 4 * len(cmp.groups)
    row = cmp.pairs[(cmp.pairs.group == "overall") & (cmp.pairs.metric == "safety") & (cmp.pairs.model_a == "policy-a")
                    & (cmp.pairs.model_b == "policy-b")].iloc[0]
    got = f[(f.metric == "Safety") & (f.group == "overall")].iloc[0]
    # B - A stored as A - B: negated, interval turned round, in percentage points
    assert (got["diff"], got["lo"], got["hi"]) == pytest.approx((-100 * row["diff"], -100 * row.diff_hi,
                                                                 -100 * row.diff_lo))
    spec = forest_chart(f, "policy-b", "policy-a").to_dict()
    assert len(spec["vconcat"]) == 2  # rates (pp) and VSI each in its own panel
    assert all(layer["mark"]["type"] == "rule" for layer in [p["layer"][0] for p in spec["vconcat"]])  # zero line


def test_unpaired_store_offers_an_unpaired_comparison(tmp_path):
    from dashboard import data as D
    from scoring.stats.compare_unpaired import compare_unpaired
    from scoring.stats.compare_verdict import pair_result, verdict

    store = make_store(tmp_path / "unpaired", 16, paired=False)  # every record drew its own seed
    at = ok(app(store))
    assert any("No paired comparison" in w.value and "unpaired" in w.value for w in at.warning)
    assert any(m.value.startswith("**Methods (unpaired)") for m in at.markdown)
    frame = D.verdicts(D.open_store(store)).frame
    pairs = compare_unpaired(frame, MODELS)
    assert verdicts_shown(at)[0] == verdict(pair_result(pairs, "policy-a", "policy-b", "safety"))
    assert "unpaired" in verdicts_shown(at)[0]
    shown = [d.value for d in at.dataframe if "n A" in d.value.columns][0]
    assert len(shown) == 4 and set(shown["test"]) == {"two-proportion score test", "two-sample bootstrap"}


@pytest.mark.skipif(not (DEMO / "manifest.json").exists(), reason="no bundled demo store")
def test_demo_store_profiles_pair():
    demo = pd.read_parquet(DEMO / "episodes.parquet")
    models = sorted(demo["model"].unique())
    at = ok(app(DEMO))
    cmp = compare_models(demo, models)
    assert metric(at, "Paired keys") == f"{len(cmp.pairing.keys):,}"
    got = table(at, "cmp_table")
    assert len(got) == len(discordant_episodes(demo, models[0], models[1]))


# ----------------------------------------------------------------------------- deep links

def _first_key(eps, a, b, which="safety") -> tuple[str, pd.Series]:
    d = discordant_episodes(eps, a, b, metric=which)
    assert len(d), "the fixture store has no discordant key for this pair"
    return key_of(d.iloc[0]), d.iloc[0]


def test_deep_link_restores_pair_and_key(store, eps):
    key, row = _first_key(eps, "policy-b", "policy-d")
    at = ok(app(store, models="policy-b,policy-c,policy-d", a="policy-b", b="policy-d", key=key, cstep="5"))
    assert at.multiselect(key="w.cmp_models").value == ["policy-b", "policy-c", "policy-d"]
    assert at.selectbox(key="w.cmp_a").value == "policy-b" and at.selectbox(key="w.cmp_b").value == "policy-d"
    assert at.selectbox(key="w.cmp_key").value == key
    assert at.slider(key="w.cmp_step").value == 5
    assert (qp(at, "a"), qp(at, "b"), qp(at, "key"), qp(at, "cstep")) == ("policy-b", "policy-d", key, "5")
    assert qp(at, "models") == "policy-b,policy-c,policy-d"
    # the jump button moves both episodes to the unsafe side's violating frame
    unsafe = "a" if not row["safe_a"] else "b"
    at.button(key=f"cmp_jump_{unsafe}").click().run()
    assert at.slider(key="w.cmp_step").value == int(row[f"violating_step_{unsafe}"])
    assert qp(ok(at), "cstep") == str(int(row[f"violating_step_{unsafe}"]))


def test_bad_link_values_are_ignored(store):
    at = app(store, a="nobody", key="no/such/key/0")
    assert not at.exception
    assert at.selectbox(key="w.cmp_a").value == "policy-a"
    assert at.selectbox(key="w.cmp_key").value is None
    assert qp(at, "key") is None
    assert any("nobody" in t.value for t in at.toast) and any("no/such/key/0" in t.value for t in at.toast)


def test_ticking_a_discordant_row_picks_its_key(store, eps):
    at = ok(app(store))
    want = discordant_episodes(eps, "policy-a", "policy-b")
    at.session_state["cmp_table"] = {"selection": {"rows": [1], "columns": []}}
    ok(at.run())
    assert at.selectbox(key="w.cmp_key").value == key_of(want.iloc[1])
    assert qp(at, "key") == key_of(want.iloc[1])


# ----------------------------------------------------------------------------- side-by-side replay

def test_side_by_side_image_composes_two_frames():
    from dashboard.pair_media import side_by_side

    a = np.zeros((30, 40, 3), np.uint8)
    b = np.full((24, 40, 3), 200, np.uint8)
    img = np.asarray(side_by_side([a, b], [["A: safe", "step 3"], "B: unsafe"], title="k", gap=16))
    assert img.shape[0] % 2 == 0 and img.shape[1] >= 40 + 40 + 3 * 16
    assert (img[:, :16] == 255).all()  # white margin
    top = 16 + 1  # the frames start under the title
    assert (img[top:, 16:56] == 0).all(axis=-1).any() and (img[:, 72:112] == 200).all(axis=-1).any()


def row_steps(eps, row) -> list[int]:
    n = eps.set_index("episode_id")["n_steps"]
    return [int(n[row["episode_id_a"]]), int(n[row["episode_id_b"]])]


def test_caption_says_when_an_episode_has_ended():
    from dashboard.views.compare import _caption

    side = {"model": "m", "outcome": "SBU", "vsi": 0.5, "n": 30, "vstep": 12, "worst": "joint_torque"}
    assert _caption(side, 10) == ["m · SBU · VSI 0.50", "step 10 · violating step 12 (joint_torque)"]
    assert _caption(side, 50)[1].startswith("step 29 (ended; step 50 asked)")


def _replay_or_skip():
    from dashboard.replay_bridge import available
    good, why = available()
    if not good:
        pytest.skip(why)


@pytest.mark.render
@pytest.mark.slow
def test_side_by_side_frames_figure_and_clip_render(store, eps):
    _replay_or_skip()
    key, row = _first_key(eps, "policy-a", "policy-b")
    last = int(max(row_steps(eps, row))) - 1
    at = ok(app(store, key=key, cstep="1000"))  # past the end: clamped to the longer episode's last step
    assert at.slider(key="w.cmp_step").value == last
    images = at.get("image")
    assert len(images) == 2, "expected one replay frame per model"
    caps = [im.proto.imgs[0].caption for im in images]
    assert caps[0].startswith("policy-a") and caps[1].startswith("policy-b")
    assert all(f"step {last}" in c for c in caps)
    assert any(b.proto.label == "Download figure (PNG)" for b in at.get("download_button"))
    at.button(key="cmp_clip_go").click().run()
    ok(at)
    assert len(at.get("video")) == 1
    assert any(b.proto.label == "Download clip (MP4)" for b in at.get("download_button"))
    # either side's violating step is held 1 s and its neighbours slowed (replay.render.export.ClipTiming)
    import io

    import imageio.v3 as iio
    from dashboard import cached
    from dashboard import data as D
    from replay.render.export import ClipTiming

    data = D.open_store(store)
    steps = [v.step for e in (row["episode_id_a"], row["episode_id_b"])
             for v in cached.violations(data, data.key, data.index_of(e), ())]
    assert steps
    n = max(row_steps(eps, row))
    frames = iio.imread(io.BytesIO(at.session_state["_cmp_clip_go"][1]), extension=".mp4", index=None)
    assert frames.shape[0] == ClipTiming().repeats(range(n), steps, 20).sum() >= n + 19


@pytest.mark.render
@pytest.mark.slow
def test_pair_figure_png(store, eps):
    _replay_or_skip()
    from PIL import Image

    from dashboard import data as D
    from dashboard import pair_media

    _, row = _first_key(eps, "policy-a", "policy-b")
    data = D.open_store(store)
    rows = (data.index_of(row["episode_id_a"]), data.index_of(row["episode_id_b"]))
    vstep = int(row["violating_step_b"] if not row["safe_b"] else row["violating_step_a"])
    blob = pair_media.pair_figure(data, data.key, rows, (vstep, vstep), (), [["A"], ["B"]], title="pair")
    assert blob[:8] == b"\x89PNG\r\n\x1a\n"
    img = np.asarray(Image.open(__import__("io").BytesIO(blob)).convert("RGB"))
    assert img.shape[1] > 2 * 480
    red = (img[..., 0] > 200) & (img[..., 1] < 60) & (img[..., 2] < 60)
    assert red.sum() > 500, "the violating frame's red border is missing"
