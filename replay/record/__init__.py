"""The recording room: live LIBERO rollouts (hosts, recorder, settle), policies and their adapters, Ray.

May import: scoring, replay.scene. Never replay.render: recording does not draw.
"""

from scoring.moved import forward

__getattr__ = forward(__name__, "replay.record.recorder")  # the names of the former replay/record.py
