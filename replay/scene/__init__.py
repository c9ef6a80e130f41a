"""What both rooms need of a recorded MuJoCo scene: its asset files (named roots) and its contact forces.

May import: mujoco, scoring.errors and scoring.records.
"""
