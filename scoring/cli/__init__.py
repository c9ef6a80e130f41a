"""The `safevla` command: score, report and compare here, rollout/replay/figure/dashboard from the other packages.

May import: all of scoring; replay and dashboard only inside a command, named by string (optional extras).
"""
