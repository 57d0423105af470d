"""Pure NumPy/SciPy math of ldpflow: oracles, hashing, post-processing, heavy hitters.

Nothing here imports Apache Beam or does I/O; a test enforces it.
"""

__all__: list[str] = []
