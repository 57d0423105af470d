"""Pure NumPy/SciPy math of ldpflow: oracles, hashing, post-processing, heavy hitters.

Nothing here imports Apache Beam or does I/O; a test enforces it.

Importing the package imports the protocol packages, whose classes register themselves
(:mod:`ldpflow.core.registry`): so the registry is complete whatever module of ldpflow is
imported first, and no module needs to import a protocol inside a function to find it.
"""

from ldpflow.core import heavy_hitters, longitudinal, oracles  # noqa: F401  (registration)

__all__: list[str] = []
