"""Registry keys -> oracle classes; CLI flags, configs and tests use only the keys."""

from __future__ import annotations

from typing import Any

from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles.base import FrequencyOracle
from ldpflow.core.oracles.grr import DirectEncoding
from ldpflow.core.oracles.hadamard import HadamardResponse, OneBitHadamard
from ldpflow.core.oracles.local_hashing import BinaryLocalHashing, OptimizedLocalHashing
from ldpflow.core.oracles.pgr import ProjectiveGeometryResponse
from ldpflow.core.oracles.sketch import CountMeanSketch, HadamardCountMeanSketch
from ldpflow.core.oracles.subset import SubsetSelection
from ldpflow.core.oracles.unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding

__all__ = ["ORACLES", "make", "from_key"]

ORACLES: dict[str, type[FrequencyOracle]] = {
    "grr": DirectEncoding,
    "oue": OptimizedUnaryEncoding,
    "sue": SymmetricUnaryEncoding,
    "olh": OptimizedLocalHashing,
    "blh": BinaryLocalHashing,
    "hr": HadamardResponse,
    "ss": SubsetSelection,
    "onebit": OneBitHadamard,
    "cms": CountMeanSketch,
    "hcms": HadamardCountMeanSketch,
    "pgr": ProjectiveGeometryResponse,
}


def make(name: str, **parameters: Any) -> FrequencyOracle:
    """Build the oracle registered under ``name`` (``grr oue sue olh blh hr ss onebit cms
    hcms pgr``).

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones) or a bad parameter.
    TypeError
        For a parameter the oracle does not take, or one of the wrong type.
    """
    if not isinstance(name, str):
        raise TypeError(f"oracle name must be a string, got {type(name).__name__}")
    try:
        cls = ORACLES[name.lower()]
    except KeyError:
        raise ValueError(f"oracle must be one of {' '.join(ORACLES)}, got {name!r}") from None
    return cls(**parameters)  # type: ignore[call-arg]


def from_key(key: tuple) -> FrequencyOracle:
    """The oracle whose :attr:`~FrequencyOracle.key` is ``key`` (cached: oracles are immutable)."""
    key = ProtocolKey.coerce(key)
    if key.name not in ORACLES:
        raise ValueError(f"oracle must be one of {' '.join(ORACLES)}, got {key.name!r}")
    return key.build()
