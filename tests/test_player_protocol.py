"""The timeline player (dashboard/player_static) against the page's answers in any order, in a
real headless chromium. A host page embeds the component's own files in an iframe and speaks
Streamlit's component messages to it (`streamlit:render` in, `streamlit:setComponentValue`
out), so an ordering a loaded server produces only now and then (a slow rerun's answer to an
older value arriving after a newer one was sent) is produced here every time.

CI saw it twice in one run (tests/test_browser_timeline.py): the page's answer to a pause
arrived after a chart click had sent step 95 and pulled the player back; the answer to → did
the same after shift+←."""

from __future__ import annotations

import contextlib
import functools
import http.server
import io
import threading
import time

import pytest

from test_browser import browser, page  # noqa: F401

pytestmark = [pytest.mark.browser]

HOST = """<!doctype html><html><body><h1>host</h1>
<iframe id="player" src="index.html" title="safevla_timeline" style="width:1100px;height:500px"></iframe>
<script>
window.values = []; window.ready = false; window.prevented = [];
addEventListener("keydown", (e) => window.prevented.push(e.defaultPrevented));  // after the page's own listeners
addEventListener("message", (e) => {
  const m = e.data || {};
  if (m.type === "streamlit:componentReady") window.ready = true;
  if (m.type === "streamlit:setComponentValue") window.values.push(m.value);
});
window.renderArgs = (args) => document.getElementById("player").contentWindow.postMessage(
  { type: "streamlit:render", args: args }, "*");
// a rerun re-creating the component: a new iframe, the old one removed (or kept a while, renamed)
window.dropPlayer = (keepOld) => {
  const old = document.getElementById("player");
  window.playerStyle = old.style.cssText;
  if (keepOld) old.id = "old"; else old.remove();
};
window.addPlayer = () => {
  window.ready = false;
  const f = document.createElement("iframe");
  Object.assign(f, { id: "player", src: "index.html", title: "safevla_timeline" });
  f.style.cssText = window.playerStyle;
  document.body.appendChild(f);
};
window.reloadPlayer = () => {  // the same iframe element loads the player's page again
  window.ready = false;
  document.getElementById("player").src = "index.html?again=" + Date.now();
};
window.newPlayer = (keepOld) => { window.dropPlayer(keepOld); window.addPlayer(); };
</script></body></html>"""

N_STEPS = 60
KEPT_KEYS_S = 3  # player.js KEPT_KEYS_MS: how long the page keeps keys for a player that is not there
SLOW_S = {"vega-bundle.js": 0.0, "player.js": 0.0}  # seconds the host's server holds a file back
REQUESTED: list[str] = []  # the files the host's server was asked for, in order


PLAYER_ROOT = "document.getElementById('player').contentDocument.getElementById('timeline')"


@functools.cache
def _frame_url() -> str:
    from PIL import Image

    from dashboard.frame_batch import data_url

    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (90, 120, 150)).save(buf, format="JPEG")
    return data_url(buf.getvalue())


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from dashboard.player import component_dir

    folder = component_dir(tmp_path_factory.mktemp("player"))
    (folder / "host.html").write_text(HOST, encoding="utf-8")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # noqa: D102 - no line per request in the test output
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            name = self.path.lstrip("/").split("?")[0]
            REQUESTED.append(name)
            if SLOW_S.get(name):
                time.sleep(SLOW_S[name])  # a loaded machine: the file comes late
            super().do_GET()

    handler = functools.partial(Quiet, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/host.html"
    httpd.shutdown()


def _render(pg, *, step: int, answers: str | None, episode: str = "store#3#1|margin", frames: int = N_STEPS,
            prerendering: bool = False, web: dict | None = None) -> None:
    frame = _frame_url()
    pg.evaluate("(a) => window.renderArgs(a)", {
        "episode": episode, "spec": None, "n_steps": N_STEPS, "dt": 0.05, "step": step, "vstep": 40,
        "frames": {str(k): frame for k in range(frames)}, "total": N_STEPS, "violated": {}, "answers": answers,
        "prerendering": prerendering, "web": web})


def _player_step(pg) -> int:
    return int(pg.evaluate(f"() => {PLAYER_ROOT}.dataset.step"))


def _wait_player_step(pg, step: int) -> None:
    pg.wait_for_function(f"(k) => {PLAYER_ROOT}.dataset.step === String(k)", arg=step, timeout=10_000)


def _wait_values(pg, n: int) -> dict:
    pg.wait_for_function("(n) => window.values.length >= n", arg=n, timeout=10_000)
    return pg.evaluate("(n) => window.values[n - 1]", n)


def _first_args(pg, step: int = 10) -> None:
    """The page's first message to a (new) player, once its script is ready: `step`, no answer."""
    pg.wait_for_function("() => window.ready", timeout=20_000)
    _render(pg, step=step, answers=None)


def _shows_and_sends(pg, step: int) -> None:
    """The player shows `step` and its first value to the page says that step."""
    _wait_player_step(pg, step)
    assert _wait_values(pg, 1)["step"] == step


@contextlib.contextmanager
def _slow(name: str, seconds: float):
    """The host's server holds file `name` back `seconds` while the block runs."""
    SLOW_S[name] = seconds
    try:
        yield
    finally:
        SLOW_S[name] = 0.0


def _open(pg, host_url: str, step: int) -> None:
    pg.goto(host_url)
    _first_args(pg, step)
    _wait_player_step(pg, step)
    pg.locator("h1").click()  # keys on the host page reach the player, as on the dashboard's page


def test_a_late_answer_to_an_older_key_step_does_not_pull_the_player_back(host, page):
    _open(page, host, 10)
    page.keyboard.press("ArrowRight")
    first = _wait_values(page, 1)
    assert (first["step"], first["event"]) == (11, "step")
    page.keyboard.press("Shift+ArrowLeft")
    second = _wait_values(page, 2)
    assert second["step"] == 1 and second["seq"] != first["seq"]
    # the page's answer to → arrives only now, after the player sent shift+←'s step
    _render(page, step=11, answers=first["seq"])
    page.wait_for_timeout(300)
    assert _player_step(page) == 1, "a late answer to an older value pulled the player back"
    _render(page, step=1, answers=second["seq"])  # the answer to shift+←: nothing new
    page.wait_for_timeout(300)
    assert _player_step(page) == 1
    # the page moving its own step (its slider, the jump button) after that still moves the player
    _render(page, step=30, answers=second["seq"])
    _wait_player_step(page, 30)


def test_a_late_answer_to_a_pause_does_not_undo_a_seek(host, page):
    _open(page, host, 0)
    page.keyboard.press("Space")
    page.wait_for_function(f"() => {PLAYER_ROOT}.dataset.playing === '1'", timeout=10_000)
    page.wait_for_timeout(600)
    page.keyboard.press("Space")
    paused = _wait_values(page, 1)
    assert paused["event"] == "pause" and paused["step"] > 0
    page.frame_locator("#player").locator("#toviol").click()  # a seek to the violating step (40)
    seek = _wait_values(page, 2)
    assert (seek["step"], seek["event"]) == (40, "seek")
    _render(page, step=paused["step"], answers=paused["seq"])  # the slow answer to the pause
    page.wait_for_timeout(300)
    assert _player_step(page) == 40, "a late answer to the pause undid the seek"
    _render(page, step=40, answers=seek["seq"])
    page.wait_for_timeout(300)
    assert _player_step(page) == 40


def test_a_page_that_has_not_seen_the_players_value_yet_does_not_move_it(host, page):
    # a rerun that started before the player's value reached the server answers with the old step
    _open(page, host, 20)
    page.keyboard.press("ArrowRight")
    sent = _wait_values(page, 1)
    _render(page, step=20, answers=None)
    page.wait_for_timeout(300)
    assert _player_step(page) == 21
    _render(page, step=21, answers=sent["seq"])
    _render(page, step=5, answers=sent["seq"])  # then the page's own slider
    _wait_player_step(page, 5)


def test_a_deep_link_step_and_a_new_episode_are_shown(host, page):
    _open(page, host, 7)  # the deep link's step
    assert _player_step(page) == 7
    _render(page, step=33, answers=None, episode="store#4#1|margin")
    _wait_player_step(page, 33)


def test_a_key_pressed_before_a_new_players_arguments_came_is_applied_once_they_do(host, page):
    # the page re-creates the player when pre-rendering ends; a key between the new iframe's
    # start and the page's first message to it was lost
    _open(page, host, 10)
    page.evaluate("() => window.newPlayer(false)")
    page.wait_for_function("() => window.ready", timeout=20_000)
    page.keyboard.press("Shift+ArrowRight")
    _render(page, step=10, answers=None)
    _shows_and_sends(page, 20)


def test_only_the_newest_player_hears_the_keys(host, page):
    # while the page swaps the iframe, the old one may still be in it: one key, one step, one value
    _open(page, host, 10)
    page.evaluate("() => window.newPlayer(true)")
    _first_args(page)
    _wait_player_step(page, 10)
    page.keyboard.press("ArrowRight")
    _wait_player_step(page, 11)
    page.wait_for_timeout(800)  # both players' 450 ms have passed
    values = page.evaluate("() => window.values")
    assert [v["step"] for v in values] == [11], values
    old = page.evaluate("() => document.getElementById('old').contentDocument.getElementById('timeline').dataset.step")
    assert old == "10", "the replaced player stepped too"


def test_a_value_the_page_never_handled_is_sent_again_by_the_new_player(host, page):
    # CI of 40053bb: shift+←'s value left the old iframe while the page's run that ends
    # pre-rendering re-created it; it went to the polling fragment that run had dropped, which
    # Streamlit skips, and the page's slider kept the old step for good
    _open(page, host, 10)
    page.keyboard.press("ArrowRight")
    lost = _wait_values(page, 1)
    page.evaluate("() => window.newPlayer(false)")
    _first_args(page, step=10)  # the run that re-created the player had not handled it
    _wait_player_step(page, 11)
    again = _wait_values(page, 2)
    assert (again["step"], again["event"]) == (11, "step") and again["seq"] != lost["seq"]
    # handled by the run that re-created the player: not sent again
    page.keyboard.press("ArrowRight")
    handled = _wait_values(page, 3)
    page.evaluate("() => window.newPlayer(false)")
    page.wait_for_function("() => window.ready", timeout=20_000)
    _render(page, step=12, answers=handled["seq"])
    _wait_player_step(page, 12)
    page.wait_for_timeout(800)
    assert len(page.evaluate("() => window.values")) == 3


def test_n_or_p_the_page_never_handled_is_sent_again_by_the_new_player(host, page):
    _open(page, host, 12)
    page.keyboard.press("n")
    lost = _wait_values(page, 1)
    page.evaluate("() => window.newPlayer(false)")
    _first_args(page, step=12)  # still the same episode: the page never opened the next one
    again = _wait_values(page, 2)
    assert (again["event"], again["episode"]) == ("next", lost["episode"]) and again["seq"] != lost["seq"]


def test_v_jumps_to_the_violating_step_as_the_button_says(host, page):
    _open(page, host, 3)
    title = page.frame_locator("#player").locator("#toviol").get_attribute("title")
    assert "(v)" in title
    page.keyboard.press("v")
    _wait_player_step(page, 40)
    sent = _wait_values(page, 1)
    assert sent.pop("seq") and sent == {"step": 40, "event": "seek", "episode": "store#3#1|margin"}


def test_n_and_p_ask_the_page_for_the_next_and_previous_episode_without_moving(host, page):
    _open(page, host, 12)
    page.keyboard.press("n")
    sent = _wait_values(page, 1)
    assert sent.pop("seq") and sent == {"step": 12, "event": "next", "episode": "store#3#1|margin"}
    page.keyboard.press("p")
    sent = _wait_values(page, 2)
    assert sent.pop("seq") and sent == {"step": 12, "event": "previous", "episode": "store#3#1|margin"}
    assert _player_step(page) == 12
    help_text = page.frame_locator("#player").locator("#help").inner_text()
    assert "n/p: next/previous episode" in help_text


def test_a_player_drawn_without_frames_asks_for_the_first_once_per_episode_without_moving(host, page):
    # the page's run could not wait for the scene to open: the player asks for its first frame
    # as soon as it has mounted, instead of waiting for the page's next poll
    page.goto(host)
    page.wait_for_function("() => window.ready", timeout=20_000)
    _render(page, step=12, answers=None, frames=0, prerendering=True)
    sent = _wait_values(page, 1)
    assert sent.pop("seq") and sent == {"step": 12, "event": "frames", "episode": "store#3#1|margin"}
    _render(page, step=12, answers=None, frames=0, prerendering=True)  # the next poll, still no frame: no new ask
    _render(page, step=12, answers=None, frames=5, prerendering=True)
    _render(page, step=12, answers=None, frames=0, prerendering=True, episode="store#4#1|margin")
    assert _wait_values(page, 2)["event"] == "frames"  # another episode asks once too
    _render(page, step=12, answers=None, frames=0, prerendering=False, episode="store#5#1|margin")
    page.wait_for_timeout(300)  # nothing more to come (frames all failed, say): nothing to ask for
    values = page.evaluate("() => window.values")
    assert [v["episode"] for v in values] == ["store#3#1|margin", "store#4#1|margin"]
    assert _player_step(page) == 12


def test_a_player_sent_a_web_scene_without_webgl_says_so_once_and_keeps_the_pages_step(host, page):
    # this module's chromium runs without WebGL (tests/test_browser.py): the player asks for
    # server frames (event "nowebgl") once, with the step the page gave it, and shows them
    page.goto(host)
    page.wait_for_function("() => window.ready", timeout=20_000)
    web = {"scene": "web/none.bin", "poses": "web/none.bin"}
    _render(page, step=33, answers=None, frames=0, web=web)
    sent = _wait_values(page, 1)
    assert sent.pop("seq") and sent == {"step": 33, "event": "nowebgl", "episode": "store#3#1|margin"}
    _render(page, step=33, answers=None, frames=0, web=web)  # a rerun before the page heard it: no second ask
    _render(page, step=33, answers=None)  # the page's frames
    page.wait_for_function(f"() => {PLAYER_ROOT}.dataset.frameStep === '33'", timeout=10_000)
    assert page.evaluate(f"() => {PLAYER_ROOT}.dataset.renderer") == "frames"
    assert len(page.evaluate("() => window.values")) == 1


def test_the_chart_library_loads_once_the_first_frame_is_drawn(host, page):
    # parsing the 0.9 MB bundle and drawing the chart hold the page's main thread: the first
    # frame goes first, and the bundle follows once it is drawn
    REQUESTED.clear()
    page.goto(host)
    page.wait_for_function("() => window.ready", timeout=20_000)
    _render(page, step=12, answers=None, frames=0, prerendering=True)
    page.wait_for_timeout(600)
    assert "vega-bundle.js" not in REQUESTED  # no frame yet, and less than CHART_WAIT_MS passed
    _render(page, step=12, answers=None, frames=20, prerendering=True)
    page.wait_for_function(f"() => {{ const i = {PLAYER_ROOT}.querySelector('#frame'); "
                           "return i.dataset.step === '12' && i.complete && i.naturalWidth > 0; }", timeout=10_000)
    page.wait_for_function("() => document.getElementById('player').contentWindow.vegaEmbed !== undefined",
                           timeout=20_000)
    assert "vega-bundle.js" in REQUESTED


def test_a_player_waiting_long_for_its_first_frame_still_draws_its_chart(host, page):
    REQUESTED.clear()
    page.goto(host)
    page.wait_for_function("() => window.ready", timeout=20_000)
    _render(page, step=12, answers=None, frames=0, prerendering=True)
    page.wait_for_function("() => document.getElementById('player').contentWindow.vegaEmbed !== undefined",
                           timeout=20_000)  # CHART_WAIT_MS after the page's first message
    assert _player_step(page) == 12 and "vega-bundle.js" in REQUESTED


def test_a_player_that_changed_episode_never_reuses_a_seq_the_page_has_handled(host, page):
    # the page names the value it handled by its seq alone (`answers`): a seq the page saw for
    # the previous episode must not mark the new episode's value as handled
    _open(page, host, 10)
    page.keyboard.press("ArrowRight")
    first = _wait_values(page, 1)
    _render(page, step=11, answers=first["seq"])
    _render(page, step=30, answers=first["seq"], episode="store#4#1|margin")  # the same iframe, another episode
    _wait_player_step(page, 30)
    page.keyboard.press("ArrowRight")
    second = _wait_values(page, 2)
    assert second["episode"] == "store#4#1|margin" and second["seq"] != first["seq"]
    _render(page, step=5, answers=first["seq"], episode="store#4#1|margin")  # a run behind the new value
    page.wait_for_timeout(300)
    assert _player_step(page) == 31


def test_a_key_pressed_while_a_new_player_still_loads_its_chart_library_is_kept(host, page):
    # CI (three times): a rerun re-created the player's iframe just before shift+←; the new
    # iframe's script waited behind the 0.9 MB vega bundle, so nothing heard the key
    _open(page, host, 10)
    with _slow("vega-bundle.js", 2.0):
        page.evaluate("() => window.newPlayer(false)")
        page.wait_for_timeout(500)  # the new iframe's page is in, its chart library is not
        page.keyboard.press("Shift+ArrowRight")
        _first_args(page)
        _shows_and_sends(page, 20)


def test_a_key_pressed_after_the_old_player_left_and_before_the_new_one_came_is_kept(host, page):
    # CI of 87f6b5b: between a rerun removing the player's iframe and the new iframe's first
    # script, nothing of the player's listens (a removed iframe's listeners never run), and the
    # key was lost: the page itself keeps it for the next player
    _open(page, host, 10)
    page.evaluate("() => window.dropPlayer(false)")
    page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("ArrowLeft")
    page.evaluate("() => window.addPlayer()")
    _first_args(page)
    _shows_and_sends(page, 19)
    page.wait_for_timeout(600)
    assert len(page.evaluate("() => window.values")) == 1, "the kept keys were applied twice"
    # what the page keeps is of its own realm: none of it holds a gone player's window alive
    assert page.evaluate("""() => [window.__safevlaKeptKeys, window.__safevlaPlayer,
        window.__safevlaPlayer.doc].every((o) => o instanceof Object)""")


def test_keys_kept_for_the_next_player_expire(host, page):
    # keys pressed long before a player comes (the user on another page) are not replayed on it
    _open(page, host, 10)
    page.evaluate("() => window.dropPlayer(false)")
    page.keyboard.press("ArrowRight")
    page.wait_for_timeout(KEPT_KEYS_S * 1000 + 500)
    page.evaluate("() => window.addPlayer()")
    _first_args(page)
    page.wait_for_timeout(800)
    assert _player_step(page) == 10
    assert page.evaluate("() => window.values") == []


def test_a_key_pressed_while_the_same_iframe_loads_the_player_again_is_kept(host, page):
    # the iframe element stays in the page, but the old player's document is gone and the new
    # one's script has not run yet
    _open(page, host, 10)
    with _slow("player.js", 2.0):
        page.evaluate("() => window.reloadPlayer()")
        page.wait_for_timeout(800)  # the new index.html is in, its player.js is not
        page.keyboard.press("ArrowRight")
        _first_args(page)
    _shows_and_sends(page, 11)


def test_long_after_the_player_left_the_page_keeps_no_keys_and_scrolls_again(host, page):
    # a page that no longer shows a player (an episode without a replay): its keys are its own
    _open(page, host, 10)
    page.evaluate("() => window.dropPlayer(false)")
    page.keyboard.press("ArrowRight")  # just after: kept for the next player
    page.wait_for_timeout(KEPT_KEYS_S * 1000 + 500)
    page.keyboard.press("Space")  # long after: the page's own (it scrolls)
    assert page.evaluate("() => window.prevented.slice(-2)") == [True, False]
    assert page.evaluate("() => window.__safevlaKeptKeys.length") == 1
