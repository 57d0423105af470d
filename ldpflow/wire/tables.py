"""The envelope table: a batch of one protocol's reports as Arrow columns (what every
report writer writes), built column-wise."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ldpflow.core import codecs, registry
from ldpflow.core.keys import HEAVY_HITTERS
from ldpflow.core.oracles import Reports
from ldpflow.wire.envelope import UNSIGNED_FIELDS, nested_parameter_fields, payload_columns
from ldpflow.wire.parse import arrow_schema

__all__ = ["reports_table", "numbered_ids"]


def reports_table(
    protocol: Any,
    reports: Reports,
    report_ids: Sequence[str] | pa.Array,
    user_ids: Sequence[str] | pa.Array,
    event_times: Sequence[int] | np.ndarray,
    *,
    codec: str | None = None,
) -> pa.Table:
    """The envelopes of a batch of one protocol's reports, as Arrow columns.

    For heavy-hitter reports (the registry's heavy-hitter family) the envelope
    carries the configuration in the nested record named after the protocol, with ``codec``
    (default ``int``); ``domain_size`` is the number of groups and ``hash_range`` the OLH
    range of the reports (derived from epsilon for ``spm``, ``mcm`` and ``sfp``). Their user
    ids must be those the groups were drawn from.

    Raises
    ------
    ValueError
        If ``codec`` is given for a frequency oracle, or is no codec of the protocol's
        ``value_bits``.
    """
    n = len(reports)
    heavy = registry.is_heavy_hitter(protocol.name)
    if codec is not None and not heavy:
        raise ValueError(f"codec applies to heavy-hitter reports ({', '.join(HEAVY_HITTERS)}) "
                         f"only, got {codec!r} for {protocol.name}")
    columns: dict[str, pa.Array] = {
        "report_id": _strings(report_ids),
        "user_id": _strings(user_ids),
        "event_time": pa.array(np.asarray(event_times, dtype=np.int64)),
        "oracle": pa.repeat(pa.scalar(protocol.name), n),
        "epsilon": pa.repeat(pa.scalar(float(protocol.epsilon)), n),
        "domain_size": pa.repeat(pa.scalar(
            int(protocol.num_groups if heavy else protocol.domain_size), pa.int64()), n),
    }
    hash_range = getattr(protocol, "hash_range", None)
    columns["hash_range"] = (pa.repeat(pa.scalar(int(hash_range), pa.int32()), n)
                             if hash_range is not None else pa.nulls(n, pa.int32()))
    num_hashes = getattr(protocol, "num_hashes", None)
    columns["num_hashes"] = (pa.repeat(pa.scalar(int(num_hashes), pa.int32()), n)
                             if num_hashes is not None else pa.nulls(n, pa.int32()))
    schema = arrow_schema()
    nested: dict[str, pa.Array] = {}
    for column in payload_columns(protocol):
        values = reports.columns[column.name]
        if column.width is not None:
            array = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(column.width), n, [None, pa.py_buffer(np.ascontiguousarray(values))])
            array = array.cast(pa.binary())
        else:
            values = np.asarray(values)
            if values.dtype == np.uint64:
                values = values.view(np.int64)  # Avro long: two's complement
            target = schema.field(column.path[0]).type if len(column.path) == 1 else \
                schema.field(column.path[0]).type.field(column.path[1]).type
            array = pa.array(values.astype(np.int64)).cast(target)
        if len(column.path) == 1:
            columns[column.name] = array
        else:
            nested[column.path[1]] = array
    if heavy:
        name = protocol.name
        config = {field: int(getattr(protocol, field)) for field in nested_parameter_fields(name)
                  if field != "codec"}
        for field, value in config.items():
            if f"{name}.{field}" in UNSIGNED_FIELDS and value >= 2**63:
                config[field] = value - 2**64  # a 64-bit key as a two's-complement long
        config["codec"] = codecs.make_codec(codec or "int", bits=protocol.value_bits).name
        struct_type = schema.field(name).type
        children = []
        for child in struct_type:
            if child.name in nested:
                children.append(nested[child.name])
            else:
                children.append(pa.repeat(pa.scalar(config[child.name], child.type), n))
        columns[name] = pa.StructArray.from_arrays(children, fields=list(struct_type))
    out = []
    for field in schema:
        array = columns.get(field.name)
        out.append(array if array is not None else pa.nulls(n, field.type))
    return pa.Table.from_arrays(out, schema=schema)


def _strings(values: Sequence[str] | pa.Array) -> pa.Array:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values if isinstance(values, pa.Array) else values.combine_chunks()
    return pa.array(values, type=pa.string())


def numbered_ids(prefix: str, start: int, stop: int) -> pa.Array:
    """``f"{prefix}{i}"`` for ``i`` in ``[start, stop)``, built column-wise."""
    numbers = pc.cast(pa.array(np.arange(start, stop, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise(pa.repeat(pa.scalar(prefix), stop - start), numbers, "")


