"""dashboard.detail_timeline: which of the player's values rerun the page, what step a value
moves to, and when the page's tables wait for the player's first frame."""

import pytest

pytest.importorskip("streamlit")

from dashboard import detail_timeline as T  # noqa: E402


@pytest.mark.parametrize("value, step", [
    ({"step": 7, "event": "seek"}, 7), ({"step": "7", "event": "pause"}, 7), ({"step": 3, "event": "step"}, 3),
    ({"step": 7, "event": "next"}, None), ({"step": 7, "event": "previous"}, None),  # n / p open an episode
    ({"step": 7, "event": T.FRAMES_EVENT}, None),  # an ask for frames moves nothing
    ({"event": "seek"}, None), ({"step": None, "event": "seek"}, None), ({"step": "x", "event": "seek"}, None),
    (None, None),
])
def test_value_step(value, step):
    assert T.value_step(value) == step


def test_only_the_players_moves_rerun_the_page_from_the_timeline_fragment(monkeypatch):
    """A timeline fragment's run hands a seek, pause, key step or n / p to a page run, but
    not the player's ask for its first frame: the fragment's next run answers that one (a page
    run for it was one needless page run per episode when the ask came mid-run)."""
    monkeypatch.setattr(T.st, "session_state", {})
    tag = "store#3#1"
    value = lambda event, seq: {"step": 5, "seq": seq, "event": event, "episode": f"{tag}{T.MODE_SEP}margin"}
    for event in ("seek", "pause", "step", *T.EPISODE_EVENTS):
        assert T.reruns_page(value(event, "a:1"), tag), event
    assert not T.reruns_page(value(T.FRAMES_EVENT, "a:1"), tag)
    assert not T.reruns_page(value("seek", "a:1"), "store#4#1")  # another episode's player
    T.st.session_state["_timeline_seen"] = (f"{tag}{T.MODE_SEP}margin", "a:1")
    assert not T.reruns_page(value("seek", "a:1"), tag)  # handled already


def test_the_tables_wait_for_the_first_frame_only_on_the_run_that_first_shows_an_episode(monkeypatch):
    """`tables_wait_for_frame`: the first page run of an episode whose frames are pre-rendered
    leaves its tables to a later run (the timeline fragment reruns the page once the frame is
    out); every other run draws them, and an episode with all its frames never waits."""
    monkeypatch.setattr(T.st, "session_state", {})
    assert T.tables_wait_for_frame("a", polling=True)
    assert T.st.session_state["_tables_wait"] == "a"
    assert not T.tables_wait_for_frame("a", polling=True)  # the page's next run (the fragment's ask, a slider)
    assert "_tables_wait" not in T.st.session_state
    assert T.tables_wait_for_frame("b", polling=True)  # another episode: its first run waits again
    assert not T.tables_wait_for_frame("c", polling=False)  # every frame rendered: nothing to wait for
    assert "_tables_wait" not in T.st.session_state
    # an episode picked in the page (‹ ›, n / p): its tables are updated in place, never taken away
    assert not T.tables_wait_for_frame("d", polling=True, on_page=True)
    assert not T.tables_on_page()  # a page load: no run yet
    T.st.session_state.update(_timings=[("overview", 0.1)], _tables_drawn=True)
    assert not T.tables_on_page()  # from another page
    T.st.session_state["_timings"].append(("detail", 0.2))
    assert T.tables_on_page()
    T.st.session_state["_tables_drawn"] = False  # that run left them to a later one
    assert not T.tables_on_page()


def test_the_detail_page_imports_neither_altair_nor_scipy():
    """A fresh server's first detail page imports its modules in the page's run: Altair (0.2-0.45 s
    there) and SciPy are for other pages and exports; the player draws the timeline's dict
    (`dashboard.timeline_spec`) with its own vega bundle. A fresh interpreter, so nothing came before."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import json, sys; import dashboard.views.detail, dashboard.web_timeline, dashboard.detail_timeline; "
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'altair', 'scipy', 'vl_convert'})))")
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", probe], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
