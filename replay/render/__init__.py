"""The rendering room: offscreen replay of recorded episodes, the violation highlight, MP4/GIF/PNG/PDF export.

May import: scoring, replay.scene. Never replay.record: a replay needs only the record.
"""
