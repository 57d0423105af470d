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


def load_schema(name: str) -> dict:
    """The parsed schema ``name`` (``fastavro.parse_schema``), the form Beam's Avro IO wants."""
    import fastavro

    return fastavro.parse_schema(schema_json(name))
