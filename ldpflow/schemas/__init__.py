"""Avro schemas of ldpflow: the ``*.avsc`` files beside this module are the source of truth.

``report``: one perturbed report and its envelope; ``estimate``: the estimates of one key,
window and post-processing method. Evolution rules: add fields only with defaults, never
change what an existing field means, never reuse a removed field's name.
"""

from __future__ import annotations

import functools
import importlib.resources
import json

__all__ = ["SCHEMAS", "load_schema", "schema_json", "compact_schema"]

SCHEMAS = ("report", "estimate")


@functools.cache
def schema_json(name: str) -> dict:
    """The schema ``name`` as plain JSON (a dict)."""
    if name not in SCHEMAS:
        raise ValueError(f"schema must be one of {', '.join(SCHEMAS)}, got {name!r}")
    text = importlib.resources.files(__name__).joinpath(f"{name}.avsc").read_text("utf-8")
    return json.loads(text)


@functools.cache
def compact_schema(name: str) -> dict:
    """The schema ``name`` without its documentation (the ``doc`` of its records, fields and
    enums), for Pub/Sub messages: every message's header holds its writer's schema, and the
    report schema's docs are more than half of it (about 4 KB of a 7 KB header). Names,
    types, defaults and order are the schema's own, so a container written with it decodes
    as one written with :func:`schema_json` does (Avro's canonical form drops docs too)."""
    return _undocumented(schema_json(name))


def _undocumented(node):
    """A schema node without ``doc``: only in type and field definitions, never inside a
    ``default`` value (which is data)."""
    if isinstance(node, list):  # a union
        return [_undocumented(branch) for branch in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "doc":
            continue
        if key in ("type", "items", "values"):
            value = _undocumented(value)
        elif key == "fields":
            value = [_undocumented(field) for field in value]
        out[key] = value
    return out


def _sorted_keys(value):
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


def load_schema(name: str) -> dict:
    """The parsed schema ``name`` (``fastavro.parse_schema``), the form Beam's Avro IO wants.

    Every mapping of it has its keys sorted: a writer embeds this form in a container's
    header, and fastavro orders a field's properties by iterating a set (so by the process's
    string hash seed), which would make the same records give other bytes in another process.
    """
    import fastavro

    return fastavro.parse_schema(_sorted_keys(fastavro.parse_schema(schema_json(name))))
