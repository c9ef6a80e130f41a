"""The recording room: live LIBERO rollouts (hosts, recorder, settle), policies and their adapters, Ray.

May import: scoring, replay.scene. Never replay.render: recording does not draw.
"""
