"""Decoding one token at a time: the incremental step every search runs (``step.py``), what it keeps
between steps (``caches.py``), and the CPU kernels of a model loaded for inference (``cpu_linear.py``).

``model/`` holds the maths over whole sequences; this package reads the same weights one new position
per row.
"""
