"""Frequency oracles (``docs/spec/oracles.md``): one small class per protocol, batch first.

Every module of this package is imported here, so a new oracle is one new module: defining
its class registers it (:mod:`ldpflow.core.registry`; ``docs/architecture.md``).
"""

import importlib as _importlib
import pkgutil as _pkgutil

from ldpflow.core.oracles.base import Accumulator, Estimate, FrequencyOracle, Reports
from ldpflow.core.oracles.grr import DirectEncoding
from ldpflow.core.oracles.hadamard import HadamardResponse, OneBitHadamard
from ldpflow.core.oracles.local_hashing import (
    BinaryLocalHashing,
    OptimizedLocalHashing,
    optimal_hash_range,
)
from ldpflow.core.oracles.pgr import ProjectiveGeometryResponse
from ldpflow.core.oracles.registry import ORACLES, make
from ldpflow.core.oracles.sketch import CountMeanSketch, HadamardCountMeanSketch
from ldpflow.core.oracles.subset import SubsetSelection
from ldpflow.core.oracles.unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding

__all__ = [
    "Accumulator",
    "Estimate",
    "FrequencyOracle",
    "Reports",
    "DirectEncoding",
    "OptimizedUnaryEncoding",
    "SymmetricUnaryEncoding",
    "OptimizedLocalHashing",
    "BinaryLocalHashing",
    "HadamardResponse",
    "OneBitHadamard",
    "SubsetSelection",
    "CountMeanSketch",
    "HadamardCountMeanSketch",
    "ProjectiveGeometryResponse",
    "ORACLES",
    "make",
    "optimal_hash_range",
]

for _module in _pkgutil.iter_modules(__path__):  # modules not named above: new oracles
    _importlib.import_module(f"{__name__}.{_module.name}")
