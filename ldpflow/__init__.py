"""ldpflow: local differential privacy frequency estimation and heavy hitters on Apache Beam.

The top-level package re-exports the core API only and never imports Apache Beam::

    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=1024)
    reports = oracle.perturb(values, rng=rng)
    est = oracle.estimate(oracle.aggregate(reports))
    consistent = ldpflow.postprocess(est, "norm-sub")

The names (and ``__version__``) are looked up when first used (PEP 562), so ``import
ldpflow`` (and the command line's ``--help``) imports neither numpy nor the oracles.
"""

#: Each re-exported name -> (module, attribute).
_EXPORTS = {
    "ORACLES": ("ldpflow.core.oracles", "ORACLES"),
    "Accumulator": ("ldpflow.core.oracles", "Accumulator"),
    "Estimate": ("ldpflow.core.oracles", "Estimate"),
    "FrequencyOracle": ("ldpflow.core.oracles", "FrequencyOracle"),
    "Reports": ("ldpflow.core.oracles", "Reports"),
    "oracle": ("ldpflow.core.oracles", "make"),
    "METHODS": ("ldpflow.core.postprocess", "METHODS"),
    "postprocess": ("ldpflow.core.postprocess", "postprocess"),
}

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


def _version() -> str:
    from importlib import metadata

    try:  # the version lives in setup.py only
        return metadata.version("ldpflow")
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":
        globals()[name] = value = _version()
        return value
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ldpflow' has no attribute {name!r}")
    import importlib

    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
