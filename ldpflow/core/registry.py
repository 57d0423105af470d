"""The one registry of protocols: each protocol class declares its own facts.

A protocol is a frozen dataclass that subclasses :class:`~ldpflow.core.keys.Keyed` and sets
its registry ``name``; defining the class registers it (``Keyed.__init_subclass__`` calls
:func:`register`), so adding a protocol is adding its module. What the rest of the code
needs to know about a protocol is read here, from the class, never from a second table:

* its **family** (``family``, a class attribute set by the family's base class):
  :data:`FREQUENCY_ORACLE`, :data:`HEAVY_HITTER` or :data:`LONGITUDINAL`;
* its **parameters**: the dataclass fields (the protocol's identity on the wire,
  :attr:`~ldpflow.core.keys.Keyed.parameters`), with what each field's metadata says
  (:func:`parameter` builds such a field):

  - ``help``: the field is a **flag** of the commands that configure the protocol
    (:func:`protocol_flags`), with that help text;
  - ``wire_required``: a report must carry it even though the class has a default
    (the sketches' ``num_hashes``);
  - ``absent``: the value a report that lacks the field means (a file written before the
    field existed: heavy hitters' ``group_hash``);
  - ``flag=False``: a field that is no flag although it has help (none today);

* the facts of the other modules, as class attributes next to the math they describe:
  ``poisoning_family`` (:mod:`ldpflow.core.poisoning`, None: not defended) and the audit
  cell map (``audit_cells``, :mod:`ldpflow.core.audit`).

This module imports no protocol and nothing of ldpflow: it is the leaf every protocol
module may import. The table is complete once :mod:`ldpflow.core` is imported (its
``__init__`` imports the protocol packages), which any import of an ldpflow module does
first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = [
    "FREQUENCY_ORACLE",
    "HEAVY_HITTER",
    "LONGITUDINAL",
    "FAMILIES",
    "FlagSpec",
    "Protocols",
    "register",
    "names",
    "lookup",
    "family_of",
    "is_heavy_hitter",
    "make",
    "fields",
    "takes",
    "wire_required",
    "absent_value",
    "parameter",
    "protocol_flags",
]

#: The frequency oracles (``grr``, ``olh``, ...: ``ldpflow estimate``).
FREQUENCY_ORACLE = "frequency oracle"
#: The heavy-hitter protocols (``pem``, ...: ``ldpflow heavy-hitters``); their keys carry a
#: value ``codec`` and their reports a nested record named after the protocol.
HEAVY_HITTER = "heavy hitter"
#: The memoized (longitudinal) protocols (``rappor``, ``loloha``): clients, not wire formats.
LONGITUDINAL = "longitudinal"
FAMILIES = (FREQUENCY_ORACLE, HEAVY_HITTER, LONGITUDINAL)

#: What each family's registry names are called in messages.
_WHAT = {FREQUENCY_ORACLE: "oracle", HEAVY_HITTER: "protocol", LONGITUDINAL: "protocol",
         None: "protocol"}

_TABLE: dict[str, Any] = {}  # name -> protocol class


def register(cls: Any) -> Any:
    """Enter ``cls`` under its ``name`` (called when a protocol class is defined).

    A class that does not set ``name`` itself (an abstract base, a test's subclass of a
    registered protocol) is not entered. Redefining a class of the same module and name (a
    module reloaded) replaces it.

    Raises
    ------
    TypeError
        If another class is registered under the name, or the class has no family.
    """
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not name:
        return cls
    if getattr(cls, "family", None) not in FAMILIES:
        raise TypeError(f"protocol {cls.__qualname__} must have a family among "
                        f"{', '.join(FAMILIES)}, got {getattr(cls, 'family', None)!r}")
    old = _TABLE.get(name)
    if old is not None and (old.__module__, old.__qualname__) != (cls.__module__,
                                                                   cls.__qualname__):
        raise TypeError(f"protocol name {name!r} is taken by {old.__module__}."
                        f"{old.__qualname__}")
    _TABLE[name] = cls
    return cls


def names(family: str | None = None) -> tuple[str, ...]:
    """The registered names (of ``family``; None: all), in registration order."""
    return tuple(n for n, cls in _TABLE.items() if family is None or cls.family == family)


class Protocols(Mapping):
    """The protocols of one family (None: all) as a live, read-only mapping from name to
    class (``name in HEAVY_HITTERS``, ``", ".join(ORACLES)``, ``ORACLES["olh"]``): it reads
    the registry when used, so it can be made before the protocols are defined."""

    def __init__(self, family: str | None):
        self._family = family

    def __getitem__(self, name: str) -> Any:
        if name not in self:
            raise KeyError(name)
        return _TABLE[name]

    def __len__(self) -> int:
        return len(names(self._family))

    def __iter__(self) -> Iterator[str]:
        return iter(names(self._family))

    def __contains__(self, name: object) -> bool:
        cls = _TABLE.get(name) if isinstance(name, str) else None
        return cls is not None and (self._family is None or cls.family == self._family)

    def __repr__(self) -> str:
        return f"Protocols({self._family!r}: {' '.join(self)})"


def lookup(name: str, family: str | None = None) -> Any:
    """The class registered under ``name`` (and of ``family``, if given).

    Raises
    ------
    TypeError
        If ``name`` is not a string.
    ValueError
        For an unknown name: the message lists the known ones.
    """
    what = _WHAT[family]
    if not isinstance(name, str):
        raise TypeError(f"{what} name must be a string, got {type(name).__name__}")
    cls = _TABLE.get(name)
    if cls is None or (family is not None and cls.family != family):
        raise ValueError(f"{what} must be one of {' '.join(names(family))}, got {name!r}")
    return cls


def family_of(name: Any) -> str | None:
    """The family of the protocol ``name`` (None: no registered protocol)."""
    cls = _TABLE.get(name) if isinstance(name, str) else None
    return None if cls is None else cls.family


def is_heavy_hitter(name: Any) -> bool:
    """Whether ``name`` is a registered heavy-hitter protocol."""
    return family_of(name) == HEAVY_HITTER


def make(name: str, family: str | None = None, /, **parameters: Any) -> Any:
    """The protocol ``name`` (of ``family``, if given) built with ``parameters``."""
    return lookup(name, family)(**parameters)


def fields(name: str) -> tuple[dataclasses.Field, ...]:
    """The dataclass fields of protocol ``name``, in declaration order."""
    return dataclasses.fields(lookup(name))


def takes(name: str, parameter_name: str) -> bool:
    """Whether protocol ``name`` has the parameter ``parameter_name``."""
    return any(f.name == parameter_name for f in fields(name))


def wire_required(name: str) -> tuple[str, ...]:
    """The parameters a report of ``name`` must carry: those without a default, and those
    whose metadata says ``wire_required``."""
    return tuple(f.name for f in fields(name)
                 if f.metadata.get("wire_required")
                 or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING))


def absent_value(name: str, parameter_name: str) -> Any:
    """The value a report of ``name`` that lacks ``parameter_name`` means (metadata
    ``absent``), or None when the class's default holds."""
    for f in fields(name):
        if f.name == parameter_name:
            return f.metadata.get("absent")
    raise ValueError(f"protocol {name!r} has no parameter {parameter_name!r}")


def parameter(default: Any = dataclasses.MISSING, *, help: str | None = None,
              wire_required: bool = False, absent: Any = None, flag: bool = True,
              **field_options: Any) -> Any:
    """A dataclass field of a protocol, with the registry's metadata (module notes)."""
    metadata: dict[str, Any] = {}
    if help is not None:
        metadata["help"] = help
        metadata["flag"] = flag
    if wire_required:
        metadata["wire_required"] = True
    if absent is not None:
        metadata["absent"] = absent
    return dataclasses.field(default=default, metadata=metadata, **field_options)


@dataclasses.dataclass(frozen=True)
class FlagSpec:
    """One protocol flag of the commands: ``--name`` of ``type``.

    Attributes
    ----------
    name : str
        The flag and the parameter it sets.
    type : type
        What the flag's text converts to (``int``).
    default : object
        The flag's default: None (the protocol's own default, or one chosen from the input).
    help : str
        The text, without the protocols (``Q, the most candidates ...``); where protocols
        describe the parameter differently, each text after the protocols that say it
        (``pem: eta ...; treehist: bits per level ...``).
    protocols : tuple of str
        The protocols that take the flag, in registration order.
    """

    name: str
    type: type
    default: Any
    help: str
    protocols: tuple[str, ...]

    @property
    def text(self) -> str:
        """The help as a command shows it: ``pem, treehist: ...``."""
        return f"{', '.join(self.protocols)}: {self.help}"


def _flag_type(field: dataclasses.Field) -> type:
    hint = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    return float if "float" in str(hint) else int


def protocol_flags(family: str | None = None) -> tuple[FlagSpec, ...]:
    """The flags that configure the protocols (of ``family``; None: all), in the order of
    first declaration: every parameter whose field has ``help`` metadata (:func:`parameter`)
    is one flag, taken by every protocol that has the parameter."""
    found: dict[str, list[tuple[str, dataclasses.Field]]] = {}
    for name in names(family):
        for f in dataclasses.fields(_TABLE[name]):
            if f.metadata.get("help") is not None and f.metadata.get("flag", True):
                found.setdefault(f.name, []).append((name, f))
    out = []
    for flag, owners in found.items():
        texts: dict[str, list[str]] = {}  # help text -> the protocols that say it
        for name, f in owners:
            texts.setdefault(f.metadata["help"], []).append(name)
        if len(texts) == 1:
            text = next(iter(texts))
        else:
            text = "; ".join(f"{', '.join(who)}: {said.rstrip('.')}"
                             for said, who in texts.items()) + "."
        out.append(FlagSpec(flag, _flag_type(owners[0][1]), None, text,
                            tuple(name for name, _ in owners)))
    return tuple(out)
