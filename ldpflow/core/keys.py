"""The identity of a protocol configuration: :class:`ProtocolKey`.

Reports, accumulators and results of different configurations must never mix, so every
one of them carries the key of the configuration it belongs to: the protocol's registry
name and its parameters. A key is a tuple ``(name, (parameter, value), ...)`` with the
parameters sorted by name, so it is hashable, ordered, picklable and deterministic as a
Beam key. It has one text form (:meth:`ProtocolKey.to_json`, stable: sorted keys), and one
way to the protocol it names: :attr:`ProtocolKey.protocol`, built once per key and cached
(protocols are immutable), so a call site never rebuilds it from the parameters.

Heavy-hitter keys (:data:`HEAVY_HITTERS`: ``pem``, ``spm``, ``mcm``, ``treehist``,
``sfp``) also carry ``codec``: how the reports' values were made integers. It is part of
the reports' identity (values of two codecs cannot be counted together) but not a
parameter of the protocol, so :attr:`ProtocolKey.protocol` leaves it out and
:attr:`ProtocolKey.codec` reads it.

This module imports no protocol: the protocol classes register themselves when they are
defined (:class:`Keyed`), and :attr:`ProtocolKey.protocol` looks the name up in
:mod:`ldpflow.core.registry`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any, ClassVar

from ldpflow.core import registry

__all__ = ["ProtocolKey", "Keyed", "PEM", "HEAVY_HITTERS"]

#: The registry name of the prefix extending method, the default heavy-hitter protocol.
PEM = "pem"
#: The registry names of the heavy-hitter protocols (a live view of the registry's
#: :data:`~ldpflow.core.registry.HEAVY_HITTER` family): their keys carry a ``codec``.
HEAVY_HITTERS: registry.Protocols = registry.Protocols(registry.HEAVY_HITTER)


class ProtocolKey(tuple):
    """``(name, (parameter, value), ...)``, parameters sorted by name.

    Parameters
    ----------
    name : str
        The registry name (``grr``, ``olh``, ..., or one of :data:`HEAVY_HITTERS`).
    parameters : mapping
        The configuration's parameters as plain Python values (heavy hitters: with
        ``codec``).
    """

    __slots__ = ()
    # Beam encodes a tuple type with ``_fields`` deterministically, as its items, and
    # rebuilds it as ``cls(*items)``: so a key can be a Beam key as it is.
    _fields = ("name", "parameters")

    def __new__(cls, name: str, *parameters: Any) -> ProtocolKey:
        """``ProtocolKey(name, {parameter: value})`` (or ``(name, (p, v), ...)``)."""
        if not isinstance(name, str):
            raise TypeError(f"protocol name must be a string, got {type(name).__name__}")
        if len(parameters) == 1 and isinstance(parameters[0], Mapping):
            items = parameters[0].items()
        else:
            items = parameters  # type: ignore[assignment]
        return super().__new__(cls, (name, *sorted(items)))

    def __getnewargs__(self) -> tuple[str, dict[str, Any]]:  # pickling
        return self.name, self.parameters

    @classmethod
    def coerce(cls, key: ProtocolKey | tuple | list) -> ProtocolKey:
        """A :class:`ProtocolKey` of a key tuple (``(name, (p, v), ...)``)."""
        if isinstance(key, ProtocolKey):
            return key
        if not isinstance(key, (tuple, list)) or not key or not isinstance(key[0], str):
            raise ValueError(f"a protocol key is (name, (parameter, value), ...), got {key!r}")
        try:
            params = dict(key[1:])
        except (TypeError, ValueError):
            raise ValueError(
                f"a protocol key holds (parameter, value) pairs after its name, got {key!r}"
            ) from None
        return cls(key[0], params)

    @classmethod
    def heavy_hitters(cls, protocol: Any, codec: str | None = "int") -> ProtocolKey:
        """The key of heavy-hitter reports: the parameters of ``protocol`` (a configuration
        of one of :data:`HEAVY_HITTERS`) and the value ``codec`` (None: ``int``).

        Raises
        ------
        ValueError
            If ``protocol`` is no heavy-hitter protocol.
        """
        name = getattr(protocol, "name", None)
        if not registry.is_heavy_hitter(name):
            raise ValueError(f"heavy-hitter keys are of {', '.join(HEAVY_HITTERS)}, got "
                             f"{name!r}")
        return cls(protocol.name, {**protocol.parameters, "codec": codec or "int"})

    @property
    def name(self) -> str:
        return self[0]

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters (heavy hitters: with ``codec``)."""
        return dict(self[1:])

    @property
    def codec(self) -> str | None:
        """The value codec of a heavy-hitter key (``int`` when absent); None for oracles."""
        return (self.parameters.get("codec", "int") if registry.is_heavy_hitter(self.name)
                else None)

    def to_json(self) -> str:
        """The stable text form: ``{"oracle": name, parameter: value, ...}``, keys sorted."""
        return json.dumps({"oracle": self.name, **self.parameters}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ProtocolKey:
        """Inverse of :meth:`to_json`, normalised through the protocol's own checks."""
        params = json.loads(text)
        if not isinstance(params, dict) or not isinstance(params.get("oracle"), str):
            raise ValueError(f"a protocol key's text is an object with 'oracle', got {text!r}")
        name = params.pop("oracle")
        heavy = registry.is_heavy_hitter(name)
        codec = params.pop("codec", None) if heavy else None
        protocol = cls(name, params).protocol
        return cls.heavy_hitters(protocol, codec) if heavy else protocol.key

    @property
    def protocol(self) -> Any:
        """The protocol object this key names, built on first use and cached per key
        (protocols are immutable; heavy hitters: without ``codec``).

        Raises
        ------
        ValueError, TypeError
            As the protocol's constructor does for bad parameters.
        """
        return _build(self)

    def build(self) -> Any:
        """:attr:`protocol` (the same cached object), for the callers not yet moved to it."""
        return _build(self)


@functools.lru_cache(maxsize=512)
def _build(key: ProtocolKey) -> Any:
    params = key.parameters
    if registry.is_heavy_hitter(key.name):
        params.pop("codec", None)  # the reports' value codec: no parameter of the protocol
    return registry.make(key.name, **params)


class Keyed:
    """Mixin of a protocol that is a frozen dataclass whose fields are its parameters on the
    wire (the frequency oracles, the heavy-hitter protocols)."""

    name: ClassVar[str]
    #: The protocol's family (:data:`~ldpflow.core.registry.FAMILIES`), set by its base.
    family: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        registry.register(cls)  # a class that sets its own ``name`` is a protocol

    @property
    def parameters(self) -> dict[str, Any]:
        """The parameters as plain Python values (the protocol's identity on the wire)."""
        return {f.name: getattr(self, f.name)
                for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @property
    def key(self) -> ProtocolKey:
        """A hashable identity: only reports and accumulators of equal keys mix."""
        return ProtocolKey(self.name, self.parameters)

