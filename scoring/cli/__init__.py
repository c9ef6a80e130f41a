"""The `safevla` command: score, report and compare here, rollout/replay/figure/dashboard from the other packages.

May import: all of scoring; replay and dashboard only inside a command, named by string (optional extras).
"""

from scoring.moved import forward

__getattr__ = forward(__name__, "scoring.cli.main")  # the names of the former scoring/cli.py
