"""Protocol building, the second half of a parse: one configuration's envelope fields -> its
protocol and key, or the reason no conforming client could have sent it.

:mod:`ldpflow.wire.parse` checks the envelope (fields present, of the right type) and
groups the rows by configuration; this module turns each configuration into a protocol with
what the protocol classes declare in :mod:`ldpflow.core.registry`, and nothing else:

* the family of the name (``oracle`` names a frequency oracle or a heavy-hitter protocol;
  any other name is unknown);
* a frequency oracle's optional top-level parameters (``hash_range``, ``num_hashes``) are
  those of its class; a report of an oracle without the field may not carry it, and one of
  an oracle that needs it on the wire must (:func:`~ldpflow.core.registry.wire_required`);
* a heavy-hitter protocol's configuration is its nested record
  (:func:`~ldpflow.wire.envelope.nested_parameter_fields`), every field required but
  ``codec`` and those whose field declares the value an older report means
  (:func:`~ldpflow.core.registry.absent_value`: ``group_hash``); a protocol without a
  ``hash_range`` parameter derives it from epsilon, so a report may state it only as that
  value.

Every value is checked once: against the policy's limits where a value is too costly to
build (epsilon, domain size), then by the protocol's own constructor
(:mod:`ldpflow.core.validation` messages: a NaN or infinite epsilon is invalid, not over a
limit), then against the policy's other limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ldpflow.core import codecs, registry
from ldpflow.core.heavy_hitters import MAX_QUERY_LIMIT
from ldpflow.core.keys import ProtocolKey
from ldpflow.wire.envelope import PARAMETER_FIELDS, UNSIGNED_FIELDS, nested_parameter_fields

if TYPE_CHECKING:
    from ldpflow.wire.parse import AcceptancePolicy

__all__ = ["build_protocol"]

#: The top-level parameters an oracle may leave out (null): all but the name, epsilon and
#: domain size, which every report carries.
_OPTIONAL_TOP = tuple(n for n in PARAMETER_FIELDS if n not in ("oracle", "epsilon", "domain_size"))


def build_protocol(fields: dict[str, Any], policy: AcceptancePolicy
                   ) -> tuple[Any, ProtocolKey] | str:
    """The protocol of one configuration and its key, or why its reports are refused.

    Parameters
    ----------
    fields : dict
        The configuration's envelope fields by name (``oracle``, ``epsilon``, ...; a
        heavy-hitter report's with its nested record's fields).
    policy : AcceptancePolicy
        What the server accepts.

    Returns
    -------
    (protocol, key) or (reason, key) or reason
        ``(protocol, key)`` when accepted; ``(reason, key)`` for a valid protocol the policy
        refuses; a reason alone when there is no protocol.
    """
    name = fields["oracle"]
    family = registry.family_of(name)
    if family not in (registry.FREQUENCY_ORACLE, registry.HEAVY_HITTER):
        known = " ".join([*registry.names(registry.FREQUENCY_ORACLE),
                          *registry.names(registry.HEAVY_HITTER)])
        return f"unknown oracle {name!r} (known: {known})"
    heavy = family == registry.HEAVY_HITTER
    if heavy:
        problem = policy.heavy_hitter_problem(name)
        if problem:
            return problem
    problem = policy.raw_problem(name, fields["epsilon"], fields["domain_size"])
    if problem:
        return problem
    try:
        found = (_heavy_hitter_protocol if heavy else _oracle)(name, fields)
    except (TypeError, ValueError, OverflowError) as exc:
        return f"invalid parameters: {exc}"
    if isinstance(found, str):
        return found
    protocol, key = found
    problem = policy.problem(protocol, key)
    return (problem, key) if problem else (protocol, key)


def _oracle(name: str, fields: dict[str, Any]) -> tuple[Any, ProtocolKey] | str:
    params: dict[str, Any] = {"epsilon": fields["epsilon"], "domain_size": fields["domain_size"]}
    required = registry.wire_required(name)
    for field in _OPTIONAL_TOP:
        value = fields.get(field)
        if value is None:
            if field in required:
                return f"missing field {field!r} for oracle {name}"
            continue
        if not registry.takes(name, field):
            return f"invalid parameters: {name} takes no {field}"
        params[field] = value
    protocol = registry.make(name, registry.FREQUENCY_ORACLE, **params)
    return protocol, protocol.key


def _heavy_hitter_protocol(name: str, fields: dict[str, Any]) -> tuple[Any, ProtocolKey] | str:
    """The configuration of a heavy-hitter report and its key with the codec."""
    names = nested_parameter_fields(name)
    absent = {n: registry.absent_value(name, n) for n in names if n != "codec"}
    missing = [n for n in names
               if fields.get(n) is None and n != "codec" and absent[n] is None]
    if missing:
        return f"missing field '{name}.{missing[0]}' for oracle {name}"
    params = {n: absent[n] if fields[n] is None else fields[n] for n in absent}
    for n in params:
        if f"{name}.{n}" in UNSIGNED_FIELDS:  # a 64-bit key, as a two's-complement long
            params[n] %= 2**64
    params["epsilon"] = fields["epsilon"]
    hash_range = fields["hash_range"]
    derived = not registry.takes(name, "hash_range")  # the protocol derives it from epsilon
    if hash_range is not None and not derived:  # null: the protocol's default for epsilon
        params["hash_range"] = hash_range
    limit = params.get("query_limit")
    if limit is not None and limit > MAX_QUERY_LIMIT:
        return f"invalid parameters: query_limit must be <= 2**28, got {limit}"
    protocol = registry.make(name, registry.HEAVY_HITTER, **params)
    if derived and hash_range is not None and hash_range != protocol.hash_range:
        return (f"invalid parameters: hash_range of a {name} report must be "
                f"{protocol.hash_range} (derived from epsilon {protocol.epsilon!r}); got "
                f"{hash_range}")
    codec = codecs.make_codec(fields.get("codec") or "int", bits=protocol.value_bits).name
    if fields["domain_size"] != protocol.num_groups:
        return (f"invalid parameters: domain_size of a {name} report must be its number of "
                f"groups, {protocol.num_groups}; got {fields['domain_size']}")
    return protocol, ProtocolKey.heavy_hitters(protocol, codec)
