"""Host adapters, one module per benchmark: build its envs, name body roles, run recorded episodes.

libero.py is the LIBERO host (scene_boxes.py: its object boxes); a new host is a module beside it.
"""
