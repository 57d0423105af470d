"""ldpflow: local differential privacy frequency estimation and heavy hitters on Apache Beam.

The top-level package re-exports the core API only and never imports Apache Beam::

    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=1024)
    reports = oracle.perturb(values, rng=rng)
    est = oracle.estimate(oracle.aggregate(reports))
    consistent = ldpflow.postprocess(est, "norm-sub")
"""

from importlib import metadata as _metadata

from ldpflow.core.oracles import ORACLES, Accumulator, Estimate, FrequencyOracle, Reports
from ldpflow.core.oracles import make as oracle
from ldpflow.core.postprocess import METHODS, postprocess

try:  # the version lives in setup.py only
    __version__ = _metadata.version("ldpflow")
except _metadata.PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "ORACLES",
    "Accumulator",
    "Estimate",
    "FrequencyOracle",
    "Reports",
    "METHODS",
    "oracle",
    "postprocess",
    "__version__",
]
