"""Avro schemas of ldpflow: the ``*.avsc`` files beside this module are the source of truth.

``report``: one perturbed report and its envelope; ``estimate``: the estimates of one key,
window and post-processing method. Evolution rules: add fields only with defaults, never
change what an existing field means, never reuse a removed field's name.
"""

from __future__ import annotations

import functools
import importlib.resources
import json

__all__ = ["SCHEMAS", "load_schema", "schema_json"]

SCHEMAS = ("report", "estimate")


@functools.cache
def schema_json(name: str) -> dict:
    """The schema ``name`` as plain JSON (a dict)."""
    if name not in SCHEMAS:
        raise ValueError(f"schema must be one of {', '.join(SCHEMAS)}, got {name!r}")
    text = importlib.resources.files(__name__).joinpath(f"{name}.avsc").read_text("utf-8")
    return json.loads(text)


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
