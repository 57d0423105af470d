"""The report envelope: its fields, and the two things a parse makes of records.

A report travels in an envelope (``schemas/report.avsc``, the source of truth): who and when
(``report_id``, ``user_id``, ``event_time``), the protocol and its parameters (``oracle``,
``epsilon``, ``domain_size``, ``hash_range``; a heavy-hitter report adds its configuration
in the nested record named after its protocol: ``pem``, ``spm``, ``mcm``, ``treehist`` or
``sfp``) and the payload in the protocol's wire form. Every field list here is derived from
the schema, from each protocol's own column spec (:func:`payload_columns`) and from the
heavy-hitter classes' parameters (:func:`nested_parameter_fields`), so there is no second
table to keep in step.

A parse turns records into :class:`ReportBatch` (valid reports of one
:class:`~ldpflow.core.keys.ProtocolKey`, as numpy columns, checked once) and
:class:`DeadLetter` (a refused record with its reason).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ldpflow.core import registry
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Reports
from ldpflow.schemas import schema_json

__all__ = [
    "REQUIRED_FIELDS",
    "PARAMETER_FIELDS",
    "PAYLOAD_FIELDS",
    "UNSIGNED_FIELDS",
    "ReportBatch",
    "narrow_column",
    "DeadLetter",
    "WireColumn",
    "payload_columns",
    "nested_parameter_fields",
    "nested_payload_fields",
    "field_kind",
    "json_safe",
]


def _nullable(avro_type: Any) -> bool:
    return isinstance(avro_type, list) and "null" in avro_type


def _fields() -> list[dict]:
    return schema_json("report")["fields"]


#: Envelope fields every report must carry (non-null in the schema).
REQUIRED_FIELDS: tuple[str, ...] = tuple(f["name"] for f in _fields() if not _nullable(f["type"]))
#: The top-level fields that name the protocol configuration (heavy hitters add the
#: :func:`nested_parameter_fields` of their record).
#: Derived: ``oracle`` and every top-level field that is a parameter of a frequency oracle or
#: a heavy-hitter protocol (``epsilon``, ``domain_size``, ``hash_range``, ``num_hashes``).
PARAMETER_FIELDS: tuple[str, ...] = ("oracle", *(
    f["name"] for f in _fields()
    if any(registry.takes(name, f["name"]) for family in (registry.FREQUENCY_ORACLE,
                                                           registry.HEAVY_HITTER)
           for name in registry.names(family))))
#: The top-level payload fields: every nullable field that is no parameter.
PAYLOAD_FIELDS: tuple[str, ...] = tuple(
    f["name"] for f in _fields() if _nullable(f["type"]) and f["name"] not in PARAMETER_FIELDS)
#: The fields of unsigned 64-bit integers, which travel as two's-complement longs (a JSON
#: client may write them unsigned): the hash seeds of the reports and of the configurations.
UNSIGNED_FIELDS: tuple[str, ...] = ("seed", "spm.seed_a", "spm.seed_b", "sfp.seed_piece",
                                    "mcm.channel_seed", "sfp.hash_seed")


def _base_kind(avro_type: Any) -> str:
    if isinstance(avro_type, list):
        (inner,) = [t for t in avro_type if t != "null"]
        return _base_kind(inner)
    if isinstance(avro_type, dict):
        return "record" if avro_type.get("type") == "record" else _base_kind(avro_type["type"])
    return {"string": "string", "long": "int", "int": "int", "double": "float",
            "bytes": "bytes", "boolean": "bool"}[avro_type]


@functools.cache
def _nested_fields(name: str) -> dict[str, str]:
    """The fields of the nested record ``name`` (``pem``, ...) and their kinds."""
    for field in _fields():
        if field["name"] == name:
            record = [t for t in field["type"] if t != "null"][0]
            return {f["name"]: _base_kind(f["type"]) for f in record["fields"]}
    return {}


@functools.cache
def field_kind(path: tuple[str, ...]) -> str:
    """``string``, ``int``, ``float``, ``bytes`` or ``record`` for a field path."""
    if len(path) == 1:
        for field in _fields():
            if field["name"] == path[0]:
                return _base_kind(field["type"])
    elif len(path) == 2 and path[1] in _nested_fields(path[0]):
        return _nested_fields(path[0])[path[1]]
    raise KeyError(f"the report schema has no field {'.'.join(path)!r}")


@dataclasses.dataclass(frozen=True)
class WireColumn:
    """One report column of a protocol and where it travels in the envelope."""

    name: str  # the column of :class:`Reports`
    path: tuple[str, ...]  # ("seed",) or ("pem", "group")
    dtype: Any  # numpy dtype of the column
    width: int | None  # bytes per row of a 2-d column (bitmaps), None for 1-d

    @property
    def label(self) -> str:
        return ".".join(self.path)


@functools.lru_cache(maxsize=256)
def _payload_columns(name: str, specs: tuple) -> tuple[WireColumn, ...]:
    top = {f["name"] for f in _fields()}
    out = []
    for column, dtype, width in specs:
        if column in top:
            path: tuple[str, ...] = (column,)
        elif column in _nested_fields(name):
            path = (name, column)
        else:
            raise KeyError(f"protocol {name!r} column {column!r} has no field in the report schema")
        out.append(WireColumn(column, path, dtype, width))
    return tuple(out)


def payload_columns(protocol: Any) -> tuple[WireColumn, ...]:
    """The payload of ``protocol``'s reports, from its own column spec (``_column_specs``):
    a column travels in the top-level field of its name, else in the nested record named
    after the protocol (``pem.group``, ``spm.seed_a``)."""
    specs = tuple((c, d, w) for c, (d, w) in protocol._column_specs().items())
    return _payload_columns(protocol.name, specs)


@functools.cache
def nested_parameter_fields(name: str) -> tuple[str, ...]:
    """The configuration fields of a heavy-hitter protocol's nested record, in schema order:
    those that are parameters of its class (``dataclasses.fields``), and ``codec``.

    Every parameter of the class travels there except ``epsilon`` and ``hash_range`` (and
    PEM's ``num_groups``), which are top-level (``domain_size`` is the number of groups).
    Empty for a name that is no heavy-hitter protocol (the oracles have no nested record).
    """
    if not registry.is_heavy_hitter(name):
        return ()
    parameters = {f.name for f in registry.fields(name)} | {"codec"}
    return tuple(f for f in _nested_fields(name) if f in parameters)


@functools.cache
def nested_payload_fields(name: str) -> tuple[str, ...]:
    """The payload columns a heavy-hitter protocol's reports carry in its nested record
    (``pem``: ``group``, ``prefix_bits``; ``spm``: ``group``, ``seed_a`` ... ``bucket_b``):
    the record's fields that are no :func:`nested_parameter_fields`."""
    if not registry.is_heavy_hitter(name):
        return ()
    config = set(nested_parameter_fields(name))
    return tuple(f for f in _nested_fields(name) if f not in config)


@dataclasses.dataclass(eq=False)
class ReportBatch:
    """Valid reports of one key with what is kept of their envelopes.

    A batch is made by the parse (:mod:`ldpflow.wire.parse`) only from rows that passed
    every check, so it is counted without checking again.

    Attributes
    ----------
    key : ProtocolKey
        The protocol and its parameters.
    reports : Reports
        The payload columns.
    id_hashes : ndarray of uint64, or None
        64-bit hashes of the report ids (:func:`ldpflow.core.dedup.string_hashes`), kept for
        deduplication.
    user_ids : ndarray of object (str), or None
    event_times : ndarray of int64 (milliseconds since the epoch), or None
    user_hashes : ndarray of uint64, or None
        64-bit hashes of the user ids (the public, unkeyed hash), kept for contribution caps
        (:mod:`ldpflow.core.contribution`).
    report_ids : ndarray of bytes (``ldpflow.core.dedup.packed_ids``), or None
        The full report ids, kept for the rows whose id hash is repeated, so that
        deduplication compares ids, not only hashes.
    """

    key: ProtocolKey
    reports: Reports
    id_hashes: np.ndarray | None = None
    user_ids: np.ndarray | None = None
    event_times: np.ndarray | None = None
    user_hashes: np.ndarray | None = None
    report_ids: np.ndarray | None = None

    _ENVELOPE = ("id_hashes", "user_ids", "event_times", "user_hashes", "report_ids")

    def __len__(self) -> int:
        return len(self.reports)

    def __reduce__(self) -> tuple:
        # Between workers, integer columns travel in the narrowest dtype that holds their
        # values (a bucket in [0, 4) as one byte, not eight); exact, restored on arrival.
        columns = {name: narrow_column(col) for name, col in self.reports.columns.items()}
        envelope = tuple(getattr(self, name) for name in self._ENVELOPE)
        return _rebuild_batch, (self.key, self.reports.oracle, columns, envelope)

    def __getitem__(self, index: slice | np.ndarray) -> ReportBatch:
        picked = {name: None if getattr(self, name) is None else getattr(self, name)[index]
                  for name in self._ENVELOPE}
        return ReportBatch(self.key, self.reports[index], **picked)

    @property
    def protocol(self) -> Any:
        """The oracle (or heavy-hitter configuration) of the key."""
        return self.key.protocol

    @classmethod
    def concat(cls, batches: Sequence[ReportBatch]) -> ReportBatch:
        key = batches[0].key
        if any(b.key != key for b in batches):
            raise ValueError("cannot concatenate report batches of different keys")

        def join(name: str) -> np.ndarray | None:
            columns = [getattr(b, name) for b in batches]
            return None if any(c is None for c in columns) else np.concatenate(columns)

        return cls(key, Reports.concat([b.reports for b in batches]),
                   **{name: join(name) for name in cls._ENVELOPE})


_NARROW = (np.uint8, np.uint16, np.int8, np.int16, np.int32, np.uint32)


def narrow_column(column: np.ndarray) -> tuple[np.ndarray, str]:
    """``column`` in the narrowest integer dtype that holds its values, and its own dtype."""
    if column.dtype.kind not in "iu" or column.itemsize == 1 or column.size == 0:
        return column, column.dtype.str
    low, high = int(column.min()), int(column.max())
    for dtype in _NARROW:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max and np.dtype(dtype).itemsize < column.itemsize:
            return column.astype(dtype), column.dtype.str
    return column, column.dtype.str


def _rebuild_batch(key: ProtocolKey, oracle: str, columns: dict, envelope: tuple) -> ReportBatch:
    restored = {name: col.astype(np.dtype(dtype), copy=False)
                for name, (col, dtype) in columns.items()}
    return ReportBatch(key, Reports(oracle, restored), *envelope)


@dataclasses.dataclass
class DeadLetter:
    """A refused record: where it came from, why, and the record itself (JSON-safe).

    ``count`` is the number of records it stands for: 1 for a record, the number a damaged
    part of a file held when that is known. When it is not known (a file whose header or
    footer is lost, a compressed stream cut short, a block of no plausible count),
    ``count_unknown`` is True, ``count`` is 0 (so that sums of counts stay sums of known
    records) and ``bytes`` says how many bytes of the file were lost, when that is known.
    The JSON form has ``count_unknown`` and ``bytes`` only when the count is unknown, so
    readers of the earlier form read it unchanged.
    """

    source: str
    reason: str
    record: Any
    key: tuple | None = None
    count: int = 1
    count_unknown: bool = False
    bytes: int | None = None

    @classmethod
    def lost(cls, source: str, reason: str, lost_bytes: int | None) -> DeadLetter:
        """A part of a file lost whole, of an unknown number of records."""
        return cls(source, reason, None, None, 0, True,
                   None if lost_bytes is None else int(lost_bytes))

    def to_json(self) -> str:
        key = ProtocolKey.coerce(self.key).to_json() if self.key else None
        out = {"source": self.source, "reason": self.reason, "key": key,
               "count": self.count, "record": json_safe(self.record)}
        if self.count_unknown:
            out.update(count_unknown=True, bytes=self.bytes)
        return json.dumps(out, sort_keys=True)


def json_safe(value: Any) -> Any:
    """Bytes as hex, numpy values as Python values, containers recursively."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value
