"""Shared by benchmarks/bench_dashboard.py and benchmarks/dashboard_frames.py: the stores,
servers of a checkout (a `--baseline` one with the modules it never installed hidden), what
"fully drawn" waits for on each page, and the browser steps they time."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from browser_timing import Server, dashboard_entry, now_ms, received, wait_drawn

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "assets" / "demo" / "store"
# what "fully drawn" waits for on each page (selector -> least count)
OVERVIEW = {'[data-testid="stMetric"]': 6, '[data-testid="stDataFrame"]': 2,
            '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg': 3}
EPISODES = {'[data-testid="stDataFrame"]': 1, '[data-testid="stMultiSelect"]': 5}
WHATIF = {'[data-testid="stMetric"]': 5, '[data-testid="stDataFrame"]': 1,
          '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg': 1}
PLAYER_IFRAME = 'iframe[title*="safevla_timeline"]'  # the detail page's frame is the player's


def store_stamp(n: int, *, renderable: bool, n_steps: int, contacts: int) -> str:
    """What a synthetic store's content depends on: its parameters, the scripts that write and
    score it (sha256 of their sources) and the registry's hash. A store in /tmp outlives
    checkouts: reused across code versions, it measured a store the code no longer writes."""
    import hashlib

    from scoring.evaluate.score import SCORER_VERSION
    from scoring.registry.lookup import load_registry

    h = hashlib.sha256(f"{n}|{renderable}|{n_steps}|{contacts}|{SCORER_VERSION}|{load_registry().hash}".encode())
    for rel in ("scripts/make_synthetic_store.py", "scoring/records/synthetic.py", "scoring/store/write.py",
                "scoring/evaluate/score.py"):
        h.update((ROOT / rel).read_bytes())
    return h.hexdigest()


def ensure_store(path: Path, n: int, *, renderable: bool = False, n_steps: int = 100, contacts: int = 4) -> Path:
    """The synthetic store at `path`, built unless one of this code's `store_stamp` is there."""
    man, stamp_file = path / "manifest.json", path / ".bench_stamp"
    stamp = store_stamp(n, renderable=renderable, n_steps=n_steps, contacts=contacts)
    if man.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        m = json.loads(man.read_text())
        if m.get("n_episodes") == n and m.get("synthetic"):
            return path
    import importlib.util
    import shutil

    spec = importlib.util.spec_from_file_location("make_synthetic_store", ROOT / "scripts" / "make_synthetic_store.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    shutil.rmtree(path, ignore_errors=True)
    mod.build_store(path, n, n_steps=n_steps, contacts_per_step=contacts, renderable=renderable, workers=1)
    stamp_file.write_text(stamp)
    return path


def secs(ms: float) -> float:
    return round(ms / 1000.0, 3)


WITHOUT: dict[Path, Path] = {}  # checkout -> a folder whose stub packages its servers cannot import


def hide_modules(code: Path, modules: list[str]) -> None:
    """Servers of the checkout `code` start with `modules` unimportable (ModuleNotFoundError,
    which Streamlit and uvicorn take as "not installed"): a `--baseline` revision measured with
    the dependencies its own pyproject installed, not ones added since (`--baseline-without`)."""
    stubs = Path(tempfile.mkdtemp(prefix="safevla-bench-without-"))
    for name in modules:
        (stubs / name).mkdir()
        (stubs / name / "__init__.py").write_text(f"raise ModuleNotFoundError({name!r} + ' is hidden from this server')\n")
    WITHOUT[Path(code)] = stubs


def server_env(code: Path) -> dict:
    """Extra environment for a server of the checkout `code` (see `hide_modules`)."""
    stubs = WITHOUT.get(Path(code))
    if stubs is None:
        return {}
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(stubs), os.environ.get("PYTHONPATH", "")) if p)}


def dashboard_server(code: Path, store: Path, env: dict | None = None) -> Server:
    """`streamlit run` of the checkout `code`'s dashboard (`dashboard_entry`) on `store`, with
    `server_env(code)` and then `env`. The demo store's trajectories lie in its sibling archive,
    which a checkout opens only for its own bundled demo: it is named to the server
    ($SAFEVLA_ARCHIVES), so a `--baseline` checkout replays this checkout's demo too."""
    archive = Path(store).resolve().parent / "archive"
    named = {"SAFEVLA_ARCHIVES": str(archive)} if archive.is_dir() else {}
    return Server(dashboard_entry(code), store=store, cwd=code, env={**named, **server_env(code), **(env or {})})


def summary(values_s: list[float]) -> dict:
    return {"median_s": round(statistics.median(values_s), 3), "max_s": round(max(values_s), 3),
            "all_s": [round(v, 3) for v in values_s]}


def open_drawn(browser, url: str, expect: dict) -> tuple[object, float]:
    """A new session on `url`; (page, seconds from navigation start to fully drawn)."""
    pg = browser.page()
    pg.goto(url)
    p = wait_drawn(pg, since_ms=0.0, expect=expect, need_run=False)
    return pg, secs(p["drawn_ms"])


def sidebar_click(pg, title: str, expect: dict) -> float:
    """A sidebar page link clicked -> that page drawn (seconds): its URL reached and the page
    changed after the click (a run seen, or DOM changes when the run was too quick to show)."""
    link = pg.get_by_test_id("stSidebarNav").get_by_role("link", name=title, exact=True)
    href = link.get_attribute("href")
    t0 = now_ms(pg)
    link.click()
    if href:
        path = urlsplit(href).path.rstrip("/")
        pg.wait_for_url(lambda url: urlsplit(url).path.rstrip("/") == path, timeout=180_000)
    return secs(wait_drawn(pg, since_ms=t0, expect=expect, need_change=True)["drawn_ms"] - t0)


def slider_step(pg, label: str, key: str = "ArrowRight", sent: list | None = None, pid: int | None = None) -> float:
    """One keyboard step of the slider `label` -> the What-if page drawn (seconds); appends
    (messages, bytes, server CPU seconds of process `pid`) for it to `sent`."""
    thumb = pg.get_by_test_id("stSlider").filter(has_text=label).get_by_role("slider")
    thumb.focus()
    n0, c0 = len(received(pg)), cpu_s(pid)
    t0 = now_ms(pg)
    thumb.press(key)
    took = secs(wait_drawn(pg, since_ms=t0, expect=WHATIF)["drawn_ms"] - t0)
    if sent is not None:
        sent.append((*messages_since(pg, n0), cpu_s(pid) - c0))
    return took


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds process `pid` has used (0 for None): the server's work for an
    interaction, which the machine's load stretches far less than its wall time."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def messages_since(pg, n0: int) -> tuple[int, int]:
    """(messages, bytes) `pg` received over its websocket after its first `n0` messages."""
    new = received(pg)[n0:]
    return len(new), sum(new)


def sent_summary(sent: list[tuple]) -> dict:
    """The median messages, bytes and server CPU per interaction (what the server did for one)."""
    if not sent:
        return {}
    out = {"messages_per_interaction": statistics.median(x[0] for x in sent),
           "bytes_per_interaction": int(statistics.median(x[1] for x in sent))}
    if all(len(x) > 2 for x in sent):
        out["server_cpu_s_per_interaction"] = round(statistics.median(x[2] for x in sent), 3)
    return out
