"""ldpflow: local differential privacy frequency estimation and heavy hitters on Apache Beam.

The top-level package re-exports the core API only and never imports Apache Beam::

    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=1024)
    reports = oracle.perturb(values, rng=rng)
    est = oracle.estimate(oracle.aggregate(reports))
    consistent = ldpflow.postprocess(est, "norm-sub")
"""

from ldpflow.core.oracles import ORACLES, Accumulator, Estimate, FrequencyOracle, Reports
from ldpflow.core.oracles import make as oracle

__version__ = "0.1.0"

__all__ = [
    "ORACLES",
    "Accumulator",
    "Estimate",
    "FrequencyOracle",
    "Reports",
    "oracle",
    "__version__",
]
