import json
import subprocess
import sys

import pytest

from scoring.cli import main
from scoring.synthetic import make_archive


def run(*argv):
    return subprocess.run([sys.executable, "-m", "scoring.cli", *argv], capture_output=True, text=True)


@pytest.mark.parametrize("command", ["score", "report", "rollout", "replay", "figure", "compare", "dashboard"])
def test_every_subcommand_has_help(command):
    out = run(command, "--help")
    assert out.returncode == 0 and "usage: safevla" in out.stdout


def test_score_then_report(tmp_path, capsys):
    make_archive(tmp_path / "arch", 8, seed=0, n_steps=40, contacts_per_step=3)
    assert main(["score", str(tmp_path / "arch"), "--out", str(tmp_path / "store"), "--no-progress"]) == 0
    assert "scored 8, skipped 0 already scored, 0 failed" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "store")]) == 0
    assert (tmp_path / "store" / "report" / "table4_main.tex").exists()


def test_bad_input_exits_non_zero_with_one_line(tmp_path):
    out = run("score", str(tmp_path / "missing"), "--out", str(tmp_path / "s"))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "no such file or directory" in out.stderr
    out = run("report", str(tmp_path / "nostore"))
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = run("report", str(tmp_path), "--by", "policy")
    assert out.returncode == 2


def test_score_reports_corrupt_episodes_but_exits_zero(tmp_path, appendix_b):
    (tmp_path / "good.json").write_text(json.dumps(appendix_b))
    (tmp_path / "bad.json").write_text("{")
    out = run("score", str(tmp_path / "good.json"), str(tmp_path / "bad.json"), "--out", str(tmp_path / "s"),
              "--no-progress")
    assert out.returncode == 0
    assert "scored 1" in out.stdout and "bad.json" in out.stderr and "not valid JSON" in out.stderr


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
