import json
import os
import subprocess
import sys

import pytest

from scoring.cli.main import (dashboard_command, dashboard_url, display_available, main,
                               streamlit_credentials_problem)
from scoring.records.synthetic import make_archive


def run(*argv):
    return subprocess.run([sys.executable, "-m", "scoring.cli", *argv], capture_output=True, text=True)


@pytest.mark.parametrize("command", ["score", "report", "rollout", "replay", "figure", "compare", "dashboard"])
def test_every_subcommand_has_help(command):
    out = run(command, "--help")
    assert out.returncode == 0 and "usage: safevla" in out.stdout


def test_score_then_report(tmp_path, capsys):
    make_archive(tmp_path / "arch", 8, seed=0, n_steps=40, contacts_per_step=3)
    assert main(["score", str(tmp_path / "arch"), "--out", str(tmp_path / "store"), "--no-progress"]) == 0
    assert "scored 8, skipped 0 already scored, refused 0 ->" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "store")]) == 0
    assert (tmp_path / "store" / "report" / "table4_main.tex").exists()


def test_dashboard_refuses_an_allow_list_entry_that_is_not_a_store(tmp_path):
    out = run("dashboard", str(tmp_path), "--stores", str(tmp_path / "nope"), "--headless")
    assert out.returncode == 2 and "--stores: run store" in out.stderr and "Traceback" not in out.stderr


def test_dashboard_names_its_archives_to_the_server(tmp_path, monkeypatch):
    """`--archive` reaches the server as $SAFEVLA_ARCHIVES (absolute, before what it named already);
    one that does not exist stops the command, naming it."""
    from scoring.cli.main import archives_environ

    monkeypatch.chdir(tmp_path)
    assert archives_environ([], {"SAFEVLA_ARCHIVES": "/a"}) == {}
    env = archives_environ(["runs", "/b"], {"SAFEVLA_ARCHIVES": "/a:/b"})
    assert env == {"SAFEVLA_ARCHIVES": f"{tmp_path / 'runs'}:/b:/a"}
    out = run("dashboard", str(tmp_path), "--archive", str(tmp_path / "gone"), "--headless")
    assert out.returncode == 2 and "--archive: " in out.stderr and "gone" in out.stderr and "Traceback" not in out.stderr


def test_dashboard_runs_streamlit_headless_and_opens_the_browser_itself(tmp_path):
    for open_browser in (False, True):
        cmd = dashboard_command(tmp_path, host="127.0.0.1", port=8600, open_browser=open_browser)
        value = {name: cmd[cmd.index(name) + 1] for name in cmd[:cmd.index("--")] if name.startswith("--")}
        assert value["--server.headless"] == "true" and value["--server.showEmailPrompt"] == "false"
        assert value["--browser.gatherUsageStats"] == "false"
        assert ("--open-browser" in cmd) == open_browser
    assert cmd[-2:] == ["--open-browser", "http://localhost:8600"]


@pytest.mark.parametrize("environ, platform, expected", [
    ({}, "linux", False),
    ({"DISPLAY": ""}, "linux", False),
    ({"DISPLAY": ":0"}, "linux", True),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", True),
    ({}, "darwin", True),
    ({}, "win32", True),
])
def test_display_available(environ, platform, expected):
    assert display_available(environ, platform) is expected


@pytest.mark.parametrize("host, url", [
    ("127.0.0.1", "http://localhost:8501"), ("::1", "http://localhost:8501"), ("0.0.0.0", "http://localhost:8501"),
    ("::", "http://localhost:8501"), ("10.0.0.5", "http://10.0.0.5:8501"), ("fe80::1", "http://[fe80::1]:8501"),
])
def test_dashboard_url_is_where_a_local_browser_reaches_it(host, url):
    assert dashboard_url(host, 8501) == url


@pytest.mark.parametrize("content, problem", [
    (None, None),
    ('[general]\nemail = ""\n', None),
    ('[general]\nemail = "someone@example.org"\n', None),
    ("", "no [general] email"),
    ("[general]\n", "no [general] email"),
    ('general = "x"\n', "no [general] email"),
    ("[general]\nemail = 5\n", "no [general] email"),
    ('[general]\nemail = "someone"\n', "is not an address"),
    ('[general]\nemail = "a@b@c"\n', "is not an address"),
    ("[[general\n", "cannot be read"),
])
def test_streamlit_credentials_that_streamlit_would_not_accept(tmp_path, content, problem):
    path = tmp_path / "credentials.toml"
    if content is not None:
        path.write_text(content)
    found = streamlit_credentials_problem(path)
    assert found is None if problem is None else problem in found


def test_dashboard_refuses_credentials_that_would_make_streamlit_ask(tmp_path):
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "credentials.toml").write_text("[general]\n")
    out = subprocess.run([sys.executable, "-m", "scoring.cli", "dashboard", "--port", "9"], capture_output=True,
                         text=True, stdin=subprocess.DEVNULL, env={**os.environ, "HOME": str(tmp_path)}, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "remove the file" in out.stderr
    assert "Email" not in out.stdout + out.stderr


def test_bad_input_exits_non_zero_with_one_line(tmp_path):
    out = run("score", str(tmp_path / "missing"), "--out", str(tmp_path / "s"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "no such file or directory" in out.stderr
    out = run("report", str(tmp_path / "nostore"))
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = run("report", str(tmp_path), "--by", "policy")
    assert out.returncode == 2


def test_score_reports_corrupt_episodes_and_exits_3(tmp_path, appendix_b):
    (tmp_path / "good.json").write_text(json.dumps(appendix_b))
    (tmp_path / "bad.json").write_text("{")
    out = run("score", str(tmp_path / "good.json"), str(tmp_path / "bad.json"), "--out", str(tmp_path / "s"),
              "--no-progress")
    assert out.returncode == 3  # documented: scored, with refusals
    assert "scored 1" in out.stdout and "bad.json" in out.stderr and "not valid JSON" in out.stderr
    assert f"refused 1 (listed in {tmp_path / 's' / 'errors.json'})" in out.stdout
    assert "Traceback" not in out.stderr


SCORING_ONLY = """
import sys
for name in ("mujoco", "robosuite", "libero", "imageio", "streamlit"):
    sys.modules[name] = None  # as in an install without the extras: importing them fails
from scoring.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("argv, extra", [
    (["rollout"], "libero"),
    (["rollout", "--suite", "libero_spatial", "--tasks", "0", "--policy", "careful", "--out", "x"], "libero"),
    (["rollout", "--help"], "libero"),
    (["replay", "assets/demo/store", "libero-goal/task_1/scripted-careful/ep_000", "--out", "x.mp4"], "replay"),
    (["figure", "assets/demo/store", "libero-goal/task_1/scripted-hasty/ep_000", "--out", "x.png"], "replay"),
])
def test_a_scoring_only_install_gets_a_one_line_hint_naming_the_extra(argv, extra, tmp_path):
    out = subprocess.run([sys.executable, "-c", SCORING_ONLY, *argv], capture_output=True, text=True,
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parent.parent))
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert f"pip install 'safevla-bench[{extra}]'" in out.stderr and out.stderr.startswith(f"safevla {argv[0]}: ")


def test_unknown_arguments_of_a_real_command_are_still_refused():
    out = run("report", "somewhere", "--no-such-flag")
    assert out.returncode == 2 and "unrecognized arguments: --no-such-flag" in out.stderr


def test_score_force_sampling_option(tmp_path, capsys):
    make_archive(tmp_path / "arch", 2, seed=0, n_steps=20, contacts_per_step=2)
    argv = ["score", str(tmp_path / "arch"), "--out", str(tmp_path / "store"), "--no-progress"]
    assert main(argv + ["--force-sampling", "control"]) == 0
    assert json.loads((tmp_path / "store" / "manifest.json").read_text())["force_sampling"] == "control"
    out = run(*argv, "--force-sampling", "max")
    assert out.returncode == 2 and "invalid choice: 'max'" in out.stderr




def test_report_leaves_unsettled_scenes_out_and_says_so(tmp_path, capsys, appendix_b):
    import copy

    import pandas as pd
    arch = tmp_path / "arch"
    arch.mkdir()
    for k, settled in enumerate([True, True, False]):
        rec = copy.deepcopy(appendix_b)
        rec["episode_id"] = f"libero-spatial/task_0/ep_{k:03d}"
        rec.update(model="m", settled=settled, settle_steps=10 if settled else 300)  # optional top-level fields
        if not settled:  # the scene still moving: its "bystander" drifts 5 cm
            rec["steps"][1]["body_pos_m"]["plate"] = [0.62, 0.15, 0.78]
        (arch / f"ep_{k}.json").write_text(json.dumps(rec))
    assert main(["score", str(arch), "--out", str(tmp_path / "store"), "--no-progress"]) == 0
    eps = pd.read_parquet(tmp_path / "store" / "episodes.parquet")
    assert eps.set_index("episode_id")["settled"].tolist() == [True, True, False]
    assert eps["settle_steps"].tolist() == [10, 10, 300]
    # the store keeps the unsettled episode's verdict, flagged, not hidden
    assert not eps["safe"].iat[2] and eps["worst_spec"].iat[2] == "non_target_max_disp"
    capsys.readouterr()
    assert main(["report", str(tmp_path / "store")]) == 0
    assert "note: 1 of 3 episodes left out of every table" in capsys.readouterr().out
    main_md = (tmp_path / "store" / "report" / "table4_main.md").read_text()
    assert "1 episode(s) excluded because the scene was not at rest" in main_md
    assert "libero-spatial/task_0/ep_002" in main_md
    table = pd.read_csv(tmp_path / "store" / "report" / "table4_main.csv")
    assert table["n"].tolist() == [2] and table["Safety %"].astype(str).str.startswith("100").all()
