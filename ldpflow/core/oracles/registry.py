"""Registry keys -> oracle classes; CLI flags, configs and tests use only the keys.

The oracles register themselves when their classes are defined (:mod:`ldpflow.core.registry`);
:data:`ORACLES` is the registry's view of the frequency-oracle family.
"""

from __future__ import annotations

from typing import Any

from ldpflow.core import registry
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles.base import FrequencyOracle

__all__ = ["ORACLES", "make", "from_key"]

#: The frequency oracles by registry key (``grr oue sue olh ...``), in registration order.
ORACLES: registry.Protocols = registry.Protocols(registry.FREQUENCY_ORACLE)


def make(name: str, **parameters: Any) -> FrequencyOracle:
    """Build the oracle registered under ``name`` (a key of :data:`ORACLES`; any case).

    Raises
    ------
    ValueError
        For an unknown name (the message lists the known ones) or a bad parameter.
    TypeError
        For a parameter the oracle does not take, or one of the wrong type.
    """
    if not isinstance(name, str):
        raise TypeError(f"oracle name must be a string, got {type(name).__name__}")
    return registry.make(name.lower(), registry.FREQUENCY_ORACLE, **parameters)


def from_key(key: tuple) -> FrequencyOracle:
    """The oracle whose :attr:`~FrequencyOracle.key` is ``key`` (cached: oracles are immutable)."""
    key = ProtocolKey.coerce(key)
    registry.lookup(key.name, registry.FREQUENCY_ORACLE)  # the oracles' message for others
    return key.protocol
