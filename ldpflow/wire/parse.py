"""The one parse path: a columnar table of report envelopes -> valid batches + dead letters.

Every format reader (:mod:`ldpflow.wire.formats`) turns what it reads into a
``pyarrow.Table`` of envelope fields; :func:`parse_table` checks it column by column with
numpy masks and splits it into one :class:`~ldpflow.wire.envelope.ReportBatch` per
protocol key and a :class:`~ldpflow.wire.envelope.DeadLetter` for every row that no
conforming client could have sent, with the first reason that applies:

1. an envelope field that is missing or of the wrong type (no coercion: ``467.5`` or
   ``"12"`` where an integer belongs is refused);
2. a configuration the server does not accept (:class:`AcceptancePolicy`): an unknown
   protocol, a heavy-hitter protocol other than the one expected (or any heavy-hitter
   report where frequency-oracle reports are expected), a missing or malformed nested
   record of a heavy-hitter protocol, invalid parameters (the protocol's own checks),
   limits of the policy, a parameter other than the one expected;
3. a payload field that is missing, of the wrong type or width, out of range, or that
   belongs to another protocol;
4. a payload value that the protocol's ``invalid_rows`` refuses (bucket >= g, ...), and a
   heavy-hitter report whose group is not the one its user id hashes to.

Only the rows in dead letters are ever turned into Python objects. Rows are checked once,
here: the batches are counted without a second check. ``records = reports + dead letters``
holds for every table.

:func:`records_to_table` is the slow path for what no columnar decoder could read (a JSON
line of a mistyped field, an Avro file of a foreign schema): it checks types record by
record and builds the same table, so the rest of the path is shared.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ldpflow.core import dedup, parallel, registry
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import ProtocolKey
from ldpflow.core.oracles import Reports
from ldpflow.wire.buffers import offsets_and_data
from ldpflow.wire.envelope import (
    PARAMETER_FIELDS,
    PAYLOAD_FIELDS,
    REQUIRED_FIELDS,
    UNSIGNED_FIELDS,
    DeadLetter,
    ReportBatch,
    WireColumn,
    field_kind,
    nested_parameter_fields,
    payload_columns,
)
from ldpflow.wire.protocols import build_protocol

__all__ = ["AcceptancePolicy", "Parsed", "KEEP_FIELDS", "parse_table", "records_to_table",
           "arrow_schema", "accepts_kind", "key_bytes", "id_column_hashes",
           "ID_COLUMN", "RESULT_BYTES_PER_VALUE"]

#: What a parse can keep of the envelope besides the payload.
KEEP_FIELDS = ("id_hashes", "user_ids", "event_times", "user_hashes", "report_ids")
#: With ``id_hashes`` in ``keep``: the id hashes are left to the caller (``Parsed.id_columns``).
ID_COLUMN = "id_column"
_INT64_MAX = 2**63 - 1
#: The memory one domain value of a key costs once estimated: a key's result holds about ten
#: vectors of the domain's length (one per post-processing method, standard errors,
#: intervals) as Python floats, then their JSON and Avro encodings; 2.2 KiB measured with the
#: default methods (``benchmarks/key_memory.py``), rounded up.
RESULT_BYTES_PER_VALUE = 4096


def key_bytes(protocol: Any) -> int | None:
    """The memory, in bytes, one frequency-oracle parameter set needs from its first report
    to its result: ``8 * counters`` for its accumulator and ``RESULT_BYTES_PER_VALUE`` per
    domain value for its estimates (None: not a frequency oracle). Computed from the
    parameters alone, before anything is allocated."""
    size = getattr(protocol, "_counts_size", None)
    if size is None:
        return None
    try:
        counters = int(size())
    except ValueError:  # a domain too large for a full-domain accumulator at all
        counters = 2**63
    return 8 * counters + RESULT_BYTES_PER_VALUE * int(protocol.domain_size)


def _mib(size: int) -> str:
    return f"{size / 2**20:,.1f} MiB" if size < 2**40 else f"{size / 2**40:,.1f} TiB"


@dataclasses.dataclass(frozen=True)
class AcceptancePolicy:
    """What the server accepts; a record outside it is a dead letter, never an allocation.

    Attributes
    ----------
    expect : mapping
        Parameters every report must have (``oracle``, ``epsilon``, ``domain_size``, ...;
        for heavy hitters also ``top_k``, ``value_bits``, ``codec`` ...). Heavy-hitter
        reports are accepted only where ``oracle`` expects their protocol.
    max_domain_size : int
        The largest domain (for heavy hitters: number of groups) a report may claim; the
        accumulator of a key holds about this many counters.
    max_hash_range : int
        The largest local-hashing range (given, or OLH's optimum for the epsilon).
    max_epsilon : float
        The largest epsilon accepted.
    max_id_bytes : int
        The longest report id, in UTF-8 bytes.
    max_keys : int
        The most parameter sets one chunk of a file may hold (the largest are kept; the rows
        of the others are refused), so that a hostile file cannot make the server build and
        count a configuration per row.
    max_counters : int
        The most counters the accumulators of one chunk's parameter sets may need together
        (8 bytes each; the sets are taken largest first, and the rows of a set that would
        pass the limit are refused), so that many large domains in one chunk cannot
        exhaust memory: a chunk's counts take at most ``8 * max_counters`` bytes.
    max_key_bytes : int
        The most memory, in bytes, that one frequency-oracle parameter set may need
        (:func:`key_bytes`: its accumulator, 8 bytes a counter, and its estimates, about
        :data:`RESULT_BYTES_PER_VALUE` a domain value); checked before anything is
        allocated, so one report claiming a huge domain is a dead letter, not a crash.
    max_dead_records : int
        Refused records kept whole per reason and chunk; the others of that reason are
        counted in one dead letter (record null), so refusing a whole file costs no memory.
    check_groups : bool
        Refuse a heavy-hitter report whose group is not the one its user id hashes to (a
        client that picked its group could report in several, or skew one stage).
    id_key : bytes, optional
        The secret key of the report-id hashes (``ldpflow.core.dedup.new_id_key``, drawn
        once per run by the job; kept out of the run's metadata), so that nobody can build
        ids whose hashes collide. Every read of one run must use one key, so that one id has
        one hash. None: the public hash (deduplication stays exact, as it compares the full
        ids of colliding rows, but planned collisions make more rows take its heavy path).
    """

    expect: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    max_domain_size: int = 2**24
    max_hash_range: int = 2**16
    max_epsilon: float = 20.0
    max_id_bytes: int = 256
    max_keys: int = 1000
    max_counters: int = 2**26
    max_key_bytes: int = 2**32
    max_dead_records: int = 1000
    check_groups: bool = True
    id_key: bytes | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def checks_groups(self) -> bool:
        """Heavy-hitter reports are expected, and their groups checked against user ids."""
        return self.check_groups and registry.is_heavy_hitter(self.expect.get("oracle"))

    def heavy_hitter_problem(self, name: str) -> str | None:
        """Why heavy-hitter reports of protocol ``name`` are refused before their nested
        record is read (None: the policy expects them)."""
        expected = self.expect.get("oracle")
        if expected == name:
            return None
        if registry.is_heavy_hitter(expected):
            return (f"oracle {name!r} reports are heavy-hitter reports of another protocol: "
                    f"this reader expects {expected!r} reports")
        return (f"oracle {name!r} reports are heavy-hitter reports (ldpflow heavy-hitters), "
                "not frequency-oracle reports")

    def problem(self, protocol: Any, key: ProtocolKey) -> str | None:
        """Why reports of ``protocol`` are refused (None: accepted)."""
        params = key.parameters
        heavy = registry.is_heavy_hitter(key.name)
        size = protocol.num_groups if heavy else params.get("domain_size")
        if size is not None and size > self.max_domain_size:
            return (f"policy: domain_size {size} exceeds the limit {self.max_domain_size} "
                    "(--max_domain_size)")
        hash_range = getattr(protocol, "hash_range", None) if heavy else params.get("hash_range")
        if hash_range is not None and hash_range > self.max_hash_range:
            return (f"policy: hash_range {hash_range} exceeds the limit {self.max_hash_range} "
                    "(--max_hash_range)")
        for name, want in self.expect.items():
            have = key.name if name == "oracle" else params.get(name, _ABSENT)
            if have is not _ABSENT and have != want:
                return f"parameter mismatch: {name} {have!r}, expected {want!r}"
        return None

    def raw_problem(self, name: str, epsilon: float, size: int) -> str | None:
        """Limits checked before a protocol object is built (a number from the envelope;
        the protocol's constructor refuses a NaN or infinite epsilon)."""
        if math.isfinite(epsilon) and epsilon > self.max_epsilon:
            return (f"policy: epsilon {epsilon!r} exceeds the limit {self.max_epsilon} "
                    "(--max_epsilon)")
        if not registry.is_heavy_hitter(name) and size > self.max_domain_size:
            return (f"policy: domain_size {size} exceeds the limit {self.max_domain_size} "
                    "(--max_domain_size)")
        return None


_ABSENT = object()


@dataclasses.dataclass
class Parsed:
    """The outcome of one parse: valid batches by key, and dead letters."""

    batches: dict[ProtocolKey, ReportBatch]
    dead_letters: list[DeadLetter]
    records: int
    #: With ``keep`` holding ``id_hashes`` and ``id_column``: key -> the ``report_id``
    #: column of the chunk and the rows of the key's batch in it, in the batch's order,
    #: whose id hashes the caller computes (:func:`id_column_hashes`; the batches' own
    #: ``id_hashes`` are then None), on a thread of its own while it counts.
    id_columns: dict[ProtocolKey, tuple[pa.Array, np.ndarray]] = dataclasses.field(
        default_factory=dict)

    @property
    def reports(self) -> int:
        return sum(len(b) for b in self.batches.values())


class _Refusals:
    """The first reason of every refused row (an index into ``reasons``, -1 while alive)."""

    def __init__(self, n: int):
        self.index = np.full(n, -1, dtype=np.int32)
        self.reasons: list[tuple[str, ProtocolKey | None]] = []

    @property
    def alive(self) -> np.ndarray:
        return self.index < 0

    def refuse(self, mask: np.ndarray, reason: str, key: ProtocolKey | None = None) -> None:
        """Refuse the rows of a full-length mask (those not refused already)."""
        self.refuse_rows(np.flatnonzero(mask), reason, key)

    def refuse_rows(self, rows: np.ndarray, reason: str, key: ProtocolKey | None = None
                    ) -> None:
        """Refuse rows given by index: the cost is that of ``rows``, not of the table."""
        new = rows[self.index[rows] < 0]
        if new.size:
            self.index[new] = len(self.reasons)
            self.reasons.append((reason, key))

    def letters(self, table: pa.Table, source: str, constants: Mapping[str, Any],
                limit: int) -> list[DeadLetter]:
        """A dead letter with its record for the first ``limit`` rows of each reason, and
        one more per reason counting the rest (its record None): memory stays bounded
        whatever share of a chunk is refused."""
        refused = np.flatnonzero(self.index >= 0)
        if refused.size == 0:
            return []
        reason_of = self.index[refused]
        order = np.argsort(reason_of, kind="stable")
        bounds = np.searchsorted(reason_of[order], np.arange(len(self.reasons) + 1))
        shown: list[np.ndarray] = []
        rest: list[tuple[int, int]] = []
        for i in range(len(self.reasons)):
            rows = refused[order[bounds[i]:bounds[i + 1]]]
            shown.append(rows[:limit])
            if rows.size > limit:
                rest.append((i, int(rows.size - limit)))
        rows = np.sort(np.concatenate(shown))
        records = _python_records(table.take(pa.array(rows)))
        out = []
        for row, record in zip(rows.tolist(), records, strict=True):
            record.update(constants)
            reason, key = self.reasons[self.index[row]]
            out.append(DeadLetter(source, reason, record, key))
        for i, count in rest:
            reason, key = self.reasons[i]
            out.append(DeadLetter(source, reason, None, key, count))
        return out


def _python_records(table: pa.Table) -> list[dict]:
    """Rows as dicts; strings that are not valid UTF-8 stay bytes (shown as hex)."""
    try:
        return table.to_pylist()
    except UnicodeDecodeError:
        def raw(t: pa.DataType) -> pa.DataType:
            if pa.types.is_string(t) or pa.types.is_large_string(t):
                return pa.large_binary()
            if pa.types.is_struct(t):
                return pa.struct([pa.field(f.name, raw(f.type)) for f in t])
            return t

        return table.cast(pa.schema([pa.field(f.name, raw(f.type)) for f in table.schema])
                          ).to_pylist()


_KIND_OK = {
    "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "int": pa.types.is_integer,
    "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "bytes": lambda t: (pa.types.is_binary(t) or pa.types.is_large_binary(t)
                        or pa.types.is_fixed_size_binary(t)),
    "record": pa.types.is_struct,
}
def accepts_kind(arrow_type: pa.DataType, kind: str) -> bool:
    """Whether a column of ``arrow_type`` can hold a field of ``kind`` (no coercion)."""
    return _KIND_OK[kind](arrow_type)


_KIND_NAME = {"string": "a string", "int": "an integer", "float": "a number",
              "bytes": "bytes", "record": "a record"}


class _Table:
    """Columns of a table by field path; absent fields read as all null."""

    def __init__(self, table: pa.Table, known_null: Iterable[str], known_present: Iterable[str],
                 constants: Mapping[str, Any]):
        self.table = table
        self.n = table.num_rows
        self.known_null = set(known_null)  # paths proven all null without reading
        self.known_present = set(known_present)  # paths proven non-null without reading
        self.constants = dict(constants)  # paths proven to hold one value in every row
        self._cache: dict[tuple[str, ...], pa.Array | None] = {}
        self._valid: dict[tuple[str, ...], np.ndarray] = {}

    def get(self, path: tuple[str, ...]) -> pa.Array | None:
        if path in self._cache:
            return self._cache[path]
        names = self.table.column_names
        array = None
        if path[0] in names:
            array = _combined(self.table.column(path[0]))
            if len(path) == 2:
                if not pa.types.is_struct(array.type) or array.type.get_field_index(path[1]) < 0:
                    array = None
                else:
                    child = pc.struct_field(array, [path[1]])
                    if array.null_count:  # a null record has null fields
                        child = pc.if_else(pc.is_valid(array), child, pa.nulls(len(child),
                                                                              child.type))
                    array = child
        if array is not None and pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        self._cache[path] = array
        return array

    def valid_mask(self, path: tuple[str, ...]) -> np.ndarray:
        """Rows where the field is non-null (computed once per field)."""
        found = self._valid.get(path)
        if found is None:
            found = self._valid[path] = self._valid_mask(path)
        return found

    def _valid_mask(self, path: tuple[str, ...]) -> np.ndarray:
        label = ".".join(path)
        if label in self.known_present or label in self.constants:
            return np.ones(self.n, dtype=bool)
        array = self.get(path)
        if array is None or label in self.known_null:
            return np.zeros(self.n, dtype=bool)
        if array.null_count == 0:
            return np.ones(self.n, dtype=bool)
        if array.null_count == len(array):
            return np.zeros(self.n, dtype=bool)
        return _np_bool(pc.is_valid(array))


def _combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _np_bool(array: pa.Array) -> np.ndarray:
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=bool)


def _int_numpy(array: pa.Array) -> np.ndarray:
    """An integer array as numpy (nulls as 0); uint64 kept unsigned."""
    if array.null_count:
        array = array.fill_null(0)
    values = array.to_numpy(zero_copy_only=False)
    return values


def _check_constant(cols: _Table, path: tuple[str, ...], refusals: _Refusals) -> None:
    label, kind = ".".join(path), field_kind(path)
    value = cols.constants[label]
    if not _PY_KIND[kind](value):
        refusals.refuse(np.ones(cols.n, dtype=bool),
                        f"malformed record: field {label!r} must be {_KIND_NAME[kind]}, "
                        f"got {type(value).__name__}")


def _check_envelope(cols: _Table, refusals: _Refusals) -> None:
    for name in REQUIRED_FIELDS:
        path = (name,)
        kind = field_kind(path)
        if name in cols.constants:
            _check_constant(cols, path, refusals)
            continue
        if name in cols.known_present:
            continue
        array = cols.get(path)
        if array is None:
            refusals.refuse(np.ones(cols.n, dtype=bool),
                            f"malformed record: missing field {name!r}")
            continue
        present = cols.valid_mask(path)
        refusals.refuse(~present, f"malformed record: missing field {name!r}")
        _check_kind(array, path, kind, np.flatnonzero(present), refusals)


def _check_kind(array: pa.Array, path: tuple[str, ...], kind: str, rows: np.ndarray,
                refusals: _Refusals, key: ProtocolKey | None = None) -> bool:
    """Refuse ``rows`` (indices of rows holding a value) of a column of the wrong type, or
    their values out of range; True if the column is usable."""
    label = ".".join(path)
    if not _KIND_OK[kind](array.type):
        refusals.refuse_rows(rows, f"malformed record: field {label!r} must be "
                                   f"{_KIND_NAME[kind]}, got {array.type}", key)
        return False
    if kind == "int" and pa.types.is_uint64(array.type) and label not in UNSIGNED_FIELDS:
        values = _int_numpy(array)[rows]
        refusals.refuse_rows(rows[values > _INT64_MAX],
                             f"malformed record: field {label!r} is out of range", key)
    if kind == "string":
        refusals.refuse_rows(_invalid_utf8(array, rows),
                             f"malformed record: field {label!r} is not valid UTF-8", key)
    return True


def _invalid_utf8(array: pa.Array, rows: np.ndarray) -> np.ndarray:
    """The rows among ``rows`` whose string is not valid UTF-8 (decoders that do not check,
    like pyarrow's JSON reader, pass such bytes through)."""
    try:
        array.validate(full=True)
        return np.zeros(0, dtype=np.int64)
    except pa.ArrowInvalid:  # the slow path, for damaged or hostile input only
        raw = array.cast(pa.large_binary()).to_pylist()
        bad = []
        for row in rows.tolist():
            try:
                if raw[row] is not None:
                    raw[row].decode("utf-8")
            except UnicodeDecodeError:
                bad.append(row)
        return np.asarray(bad, dtype=np.int64)


def _codes(array: pa.Array | None, rows: np.ndarray) -> tuple[np.ndarray | None, list[Any]]:
    """Group codes of ``array`` among ``rows`` (nulls are a value of their own) and the
    distinct values; codes None when ``rows`` hold one value."""
    if array is None or array.null_count == len(array):
        return None, [None]
    n = len(array)
    picked = array if rows.size == n else array.take(pa.array(rows))
    if picked.null_count == 0:
        if pa.types.is_integer(picked.type) or pa.types.is_floating(picked.type):
            values = picked.to_numpy(zero_copy_only=False)
            if values.size and values.min() == values.max() and not (
                    values.dtype.kind == "f" and np.isnan(values[0])):
                return None, [values[0].item()]
        elif len(picked):
            bounds = pc.min_max(picked)
            if bounds["min"].as_py() == bounds["max"].as_py():
                return None, [bounds["min"].as_py()]
    encoded = pc.dictionary_encode(picked, null_encoding="encode")  # live rows only
    codes = np.zeros(n, dtype=np.int64)
    codes[rows] = encoded.indices.to_numpy(zero_copy_only=False)
    return codes, encoded.dictionary.to_pylist()


def _groups(cols: _Table, paths: list[tuple[str, ...]], rows: np.ndarray
            ) -> list[tuple[tuple, np.ndarray]]:
    """The distinct value tuples of ``paths`` among ``rows`` and the rows of each."""
    if rows.size == 0:
        return []
    code: np.ndarray | None = None
    radix = 1
    tables = []
    for path in paths:
        label = ".".join(path)
        if label in cols.constants:
            codes, values = None, [cols.constants[label]]
        else:
            codes, values = _codes(cols.get(path), rows)
        tables.append((codes, values))
        if codes is None:
            continue
        if code is None:
            code, radix = codes.copy(), len(values)
            continue
        if radix * len(values) >= 2**62:  # re-number before the mixed radix overflows
            distinct, code = np.unique(code, return_inverse=True)
            radix = distinct.size
        code = code * len(values) + codes
        radix *= len(values)

    def value_tuple(row: int) -> tuple:
        return tuple(values[0] if codes is None else values[codes[row]]
                     for codes, values in tables)

    live = None if code is None else code[rows]
    if live is None or live.min() == live.max():
        return [(value_tuple(int(rows[0])), rows)]
    distinct, inverse = np.unique(live, return_inverse=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(distinct.size + 1))
    out = []
    for g in range(distinct.size):
        members = rows[order[bounds[g]:bounds[g + 1]]]
        out.append((value_tuple(int(members[0])), members))
    return out


def _protocol_for(values: tuple, paths: list[tuple[str, ...]], policy: AcceptancePolicy,
                  cache: dict) -> tuple[Any, ProtocolKey] | str:
    """The protocol of one configuration (parameter values in ``paths`` order), or why not
    (:func:`~ldpflow.wire.protocols.build_protocol`, cached per configuration)."""
    found = cache.get(values)
    if found is not None:
        return found
    fields = {path[-1]: value for path, value in zip(paths, values, strict=True)}
    found = build_protocol(fields, policy)
    cache[values] = found
    return found


def _payload(cols: _Table, protocol: Any, key: ProtocolKey, rows: np.ndarray,
             refusals: _Refusals) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """The payload columns of ``rows`` (all of one key) and the rows they are of, refusing
    bad rows in place; None when no row is left."""
    wanted = payload_columns(protocol)
    used = {c.path[0] for c in wanted}
    for column in wanted:
        array = cols.get(column.path)
        label = column.label
        present = cols.valid_mask(column.path)[rows] if array is not None else \
            np.zeros(rows.size, dtype=bool)
        refusals.refuse_rows(rows[~present],
                             f"missing payload field {label!r} for oracle {protocol.name}", key)
        if array is not None:
            kind = "bytes" if column.width is not None else "int"
            if not _check_kind(array, column.path, kind, rows[present], refusals, key):
                return None  # every row of the key is refused
    for other in PAYLOAD_FIELDS:
        if other in used or other in cols.known_null:
            continue
        refusals.refuse_rows(rows[cols.valid_mask((other,))[rows]],
                             f"unexpected payload field {other!r} for oracle {protocol.name}", key)
    alive = rows[refusals.index[rows] < 0]
    for column in wanted:
        if column.width is None:
            continue
        lengths = _binary_lengths(cols.get(column.path))[alive]
        wrong = lengths != column.width
        for length in np.unique(lengths[wrong]).tolist():  # one reason per length found
            refusals.refuse_rows(alive[lengths == length],
                                 f"payload {column.label!r} has {length} bytes, expected "
                                 f"{column.width} for {_width_basis(protocol)}", key)
    keep = rows[refusals.index[rows] < 0]
    if keep.size == 0:
        return None
    return {column.name: _column_values(cols.get(column.path), column, keep)
            for column in wanted}, keep


def _width_basis(protocol: Any) -> str:
    """What fixes the width of a protocol's bitmaps, for reasons (``domain_size 20``)."""
    for name in ("domain_size", "num_channels"):
        value = getattr(protocol, name, None)
        if value is not None:
            return f"{name} {value}"
    return f"oracle {protocol.name}"


def _binary_lengths(array: pa.Array) -> np.ndarray:
    if pa.types.is_fixed_size_binary(array.type):
        return np.full(len(array), array.type.byte_width, dtype=np.int64)
    return np.asarray(pc.binary_length(array).fill_null(-1).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def _column_values(array: pa.Array, column: WireColumn, rows: np.ndarray) -> np.ndarray:
    n = len(array)
    whole = rows.size == n
    if column.width is not None:  # bitmaps: (rows, width) uint8
        picked = array if whole else array.take(pa.array(rows))
        if pa.types.is_fixed_size_binary(picked.type):
            data = np.frombuffer(picked.buffers()[1], dtype=np.uint8)
            start = picked.offset * column.width
        else:  # every row has the width (checked): the rows are contiguous
            offsets, data = offsets_and_data(picked)
            start = int(offsets[0])
        flat = data[start:start + len(picked) * column.width]
        return flat.reshape(len(picked), column.width).copy()
    values = _int_numpy(array)
    if not whole:
        values = values[rows]
    if column.dtype is np.uint64:
        return values.astype(np.int64, copy=False).view(np.uint64) if values.dtype != np.uint64 \
            else values
    return values.astype(column.dtype, copy=False)


def id_column_hashes(array: pa.Array, rows: np.ndarray, key: bytes | None,
                     threads: bool = True) -> np.ndarray:
    """The id hashes of ``rows`` of a ``report_id`` column (``Parsed.id_columns``), with
    the run's key (``AcceptancePolicy.id_key``): what the batch's ``id_hashes`` would have
    been. ``threads=False``: in the calling thread alone."""
    return _id_hashes(array, rows, key, threads)


def _id_hashes(array: pa.Array, rows: np.ndarray, key: bytes | None = None,
               threads: bool = True) -> np.ndarray:
    """The keyed hashes of ``array[rows]``, in the order of ``rows`` (the column as it is
    when ``rows`` is every row in order)."""
    whole = rows.size == len(array) and bool(np.all(rows[1:] > rows[:-1]))
    picked = array if whole else array.take(pa.array(rows))
    offsets, data_array = offsets_and_data(picked)
    if not threads:
        return dedup.string_hashes(offsets, data_array, key)
    parts = parallel.map_slices(  # large columns: hashed in threads, slice by slice
        lambda part: dedup.string_hashes(offsets[part.start:part.stop + 1], data_array, key),
        len(picked))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def parse_table(
    table: pa.Table,
    *,
    source: str = "",
    policy: AcceptancePolicy | None = None,
    keep: Iterable[str] = (),
    known_null: Iterable[str] = (),
    known_present: Iterable[str] = (),
    constants: Mapping[str, Any] | None = None,
    protocols: dict | None = None,
) -> Parsed:
    """Split a table of report envelopes into valid batches per key and dead letters.

    Parameters
    ----------
    table : pyarrow.Table
        Envelope fields as columns (``schemas/report.avsc`` names; the nested records of
        the heavy-hitter protocols, ``pem`` ... ``sfp``, structs). A
        field that is absent reads as null.
    source : str
        Where the rows came from (a file name), copied into each dead letter.
    policy : AcceptancePolicy, optional
        What to accept (default: :class:`AcceptancePolicy` with its limits, nothing expected).
    keep : iterable of str
        Envelope columns to keep in the batches (:data:`KEEP_FIELDS`). ``id_column`` with
        ``id_hashes``: the id hashes are not computed here but left to the caller, as
        ``Parsed.id_columns`` (the column and the rows; :func:`id_column_hashes`).
    known_null, known_present : iterable of str
        Field paths the reader has proven all null, or free of nulls, without reading them
        (from the file's schema or statistics), so they need not be columns of ``table``.
    constants : mapping, optional
        Field paths the reader has proven to hold one value in every row (Parquet
        statistics), with that value; they need not be columns of ``table`` either.
    protocols : dict, optional
        A cache of configurations already built (kept across the chunks of a file).
    """
    policy = policy or AcceptancePolicy()
    keep = set(keep)
    unknown = keep - set(KEEP_FIELDS) - {ID_COLUMN}
    if unknown:
        raise ValueError(f"keep must name fields among {', '.join(KEEP_FIELDS)} (and "
                         f"{ID_COLUMN}), "
                         f"got {sorted(unknown)}")
    constants = dict(constants or {})
    cols = _Table(table, known_null, known_present, constants)
    refusals = _Refusals(cols.n)
    cache = protocols if protocols is not None else {}
    _check_envelope(cols, refusals)
    if "id_hashes" in keep or "report_id" not in cols.known_present:
        ids = cols.get(("report_id",))
        if ids is not None and _KIND_OK["string"](ids.type):
            refusals.refuse(_np_lengths(ids) > policy.max_id_bytes,
                            f"policy: report_id longer than {policy.max_id_bytes} bytes")
    for name in PARAMETER_FIELDS:
        path = (name,)
        if name in constants:
            if name not in REQUIRED_FIELDS:
                _check_constant(cols, path, refusals)
            continue
        array = cols.get(path)
        if array is not None and name not in REQUIRED_FIELDS:
            _check_kind(array, path, field_kind(path), np.flatnonzero(cols.valid_mask(path)),
                        refusals)
    params = [(name,) for name in PARAMETER_FIELDS]
    batches: dict[ProtocolKey, ReportBatch] = {}
    id_rows: dict[ProtocolKey, list[np.ndarray]] | None = \
        {} if {"id_hashes", ID_COLUMN} <= keep else None
    budget = _Budget(keys=policy.max_keys, counters=policy.max_counters)
    for values, rows in _within_budget(_groups(cols, params, np.flatnonzero(refusals.alive)),
                                       budget, policy, refusals):
        name = values[0]
        if registry.is_heavy_hitter(name):  # the configuration continues in the nested record
            problem = policy.heavy_hitter_problem(name)
            if problem:
                refusals.refuse_rows(rows, problem)
                continue
            nested = [(name, field) for field in nested_parameter_fields(name)]
            struct = cols.get((name,))
            if struct is None or not _KIND_OK["record"](struct.type):
                reason = (f"missing field {name!r} for oracle {name}" if struct is None else
                          f"malformed record: field {name!r} must be a record, got "
                          f"{struct.type}")
                refusals.refuse_rows(rows, reason)
                continue
            refusals.refuse_rows(rows[~cols.valid_mask((name,))[rows]],
                                 f"missing field {name!r} for oracle {name}")
            for path in nested:
                array = cols.get(path)
                if array is not None:
                    _check_kind(array, path, field_kind(path),
                                rows[cols.valid_mask(path)[rows]], refusals)
            live = rows[refusals.index[rows] < 0]
            for sub, members in _within_budget(_groups(cols, nested, live), budget, policy,
                                               refusals):
                _collect(cols, values + sub, params + nested, members, policy, cache,
                         refusals, keep, batches, budget, id_rows)
        else:
            _collect(cols, values, params, rows, policy, cache, refusals, keep, batches, budget,
                     id_rows)
    id_columns = {}
    if id_rows:
        column = cols.get(("report_id",))
        id_columns = {key: (column, parts[0] if len(parts) == 1 else np.concatenate(parts))
                      for key, parts in id_rows.items()}
    return Parsed(batches, refusals.letters(table, source, constants, policy.max_dead_records),
                  cols.n, id_columns)


def _group_mismatches(cols: _Table, protocol: Any, reports: Reports, kept: np.ndarray,
                      bad: np.ndarray, reasons: list[str]) -> tuple[np.ndarray, list[str]]:
    """Add the rows whose group is not their user id's (``assign_groups`` with the
    protocol's ``num_groups`` and ``group_hash``) to ``bad``: the ids' keys are computed
    over the column's bytes at once (version 2 with no Python loop per report)."""
    ids = cols.get(("user_id",))
    if ids is None:
        raise ValueError("checking heavy-hitter groups needs the user_id column")
    good = np.ones(kept.size, dtype=bool)
    good[bad] = False
    rows = np.flatnonzero(good)
    if rows.size == 0:
        return bad, reasons
    keys = _user_id_keys(ids.take(pa.array(kept[rows])), protocol.group_hash)
    expected = hh.groups_of_keys(keys, protocol.num_groups)
    wrong = rows[expected != reports.columns["group"][rows]]
    if wrong.size == 0:
        return bad, reasons
    order = np.argsort(np.concatenate([bad, wrong]), kind="stable")
    merged = np.concatenate([bad, wrong])[order]
    texts = [*reasons, *["group does not match the hash of user_id"] * wrong.size]
    return merged, [texts[i] for i in order.tolist()]


def _user_id_keys(ids: pa.Array, group_hash: int) -> np.ndarray:
    """The group keys (``heavy_hitters.string_keys`` of version ``group_hash``) of a string
    column of user ids, from its offsets and bytes (large columns in threads, by slice)."""
    offsets, data = offsets_and_data(ids)
    parts = parallel.map_slices(
        lambda part: hh.string_keys(offsets[part.start:part.stop + 1], data,
                                    group_hash=group_hash), len(ids))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


@dataclasses.dataclass
class _Budget:
    """What is left of one chunk's limits: parameter sets (``--max_keys``) and counters
    (``--max_counters``)."""

    keys: int
    counters: int


def _within_budget(groups: list, budget: _Budget, policy: AcceptancePolicy,
                   refusals: _Refusals) -> list:
    """The largest groups while the chunk's budget of parameter sets lasts; the rows of the
    others are refused."""
    groups = sorted(groups, key=lambda g: -g[1].size)  # stable: ties keep the input order
    kept = groups[: max(budget.keys, 0)]
    for _, rows in groups[len(kept):]:
        refusals.refuse_rows(rows, f"policy: more than {policy.max_keys} parameter sets in one "
                                   "chunk (--max_keys)")
    budget.keys -= len(kept)
    return kept


def _np_lengths(array: pa.Array) -> np.ndarray:
    return np.asarray(pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False))


def _collect(cols: _Table, values: tuple, paths: list, rows: np.ndarray,
             policy: AcceptancePolicy, cache: dict, refusals: _Refusals, keep: set,
             batches: dict, budget: _Budget, id_rows: dict | None = None) -> None:
    found = _protocol_for(values, paths, policy, cache)
    if isinstance(found, str):  # no protocol: no key
        refusals.refuse_rows(rows, found)
        return
    protocol, key = found
    if isinstance(protocol, str):  # a valid protocol the policy refuses
        refusals.refuse_rows(rows, protocol, key)
        return
    size = getattr(protocol, "_counts_size", None)  # a frequency oracle's accumulator length
    if size is not None and key not in batches:
        need_bytes = key_bytes(protocol)
        if need_bytes > policy.max_key_bytes:
            refusals.refuse_rows(
                rows, f"policy: oracle {key.name} with domain_size {protocol.domain_size} needs "
                      f"about {_mib(need_bytes)} (accumulator and estimates), more than the "
                      f"{_mib(policy.max_key_bytes)} one parameter set may take "
                      "(--max_key_bytes)", key)
            return
        need = int(size())
        if need > budget.counters:
            refusals.refuse_rows(rows, f"policy: the chunk's parameter sets need more than "
                                       f"{policy.max_counters} counters (--max_counters)", key)
            return
        budget.counters -= need
    payload = _payload(cols, protocol, key, rows, refusals)
    if payload is None:
        return
    columns, kept = payload
    reports = Reports(protocol.name, columns)
    bad, reasons = protocol.invalid_rows(reports)
    if registry.is_heavy_hitter(key.name) and policy.check_groups:
        bad, reasons = _group_mismatches(cols, protocol, reports, kept, bad, reasons)
    if bad.size:
        texts = np.asarray(reasons)
        for reason in dict.fromkeys(reasons):
            refusals.refuse_rows(kept[bad[texts == reason]], reason, key)
        good = np.ones(kept.size, dtype=bool)
        good[bad] = False
        reports, kept = reports[good], kept[good]
        if kept.size == 0:
            return
    envelope: dict[str, np.ndarray] = {}
    if id_rows is not None:  # hashed by the caller (Parsed.id_columns)
        id_rows.setdefault(key, []).append(kept)
    elif "id_hashes" in keep:
        envelope["id_hashes"] = _id_hashes(cols.get(("report_id",)), kept, policy.id_key)
    if "report_ids" in keep:  # the full ids, to confirm the rows of repeated hashes
        picked = cols.get(("report_id",)).take(pa.array(kept))
        envelope["report_ids"] = dedup.packed_ids(*offsets_and_data(picked))
    if "user_ids" in keep:
        envelope["user_ids"] = np.asarray(
            cols.get(("user_id",)).take(pa.array(kept)).to_pylist(), dtype=object)
    if "event_times" in keep:
        envelope["event_times"] = _int_numpy(cols.get(("event_time",)))[kept].astype(np.int64)
    if "user_hashes" in keep:
        envelope["user_hashes"] = _id_hashes(cols.get(("user_id",)), kept)
    batch = ReportBatch(key, reports, **envelope)
    batches[key] = ReportBatch.concat([batches[key], batch]) if key in batches else batch


# -- the per-record path ---------------------------------------------------------------------
def arrow_schema(json_form: bool = False, nullable: bool = False) -> pa.Schema:
    """The Arrow schema of the report envelope (``json_form``: ``bits`` as hex text;
    ``nullable``: every field nullable, for decoders that judge missing fields later)."""
    from ldpflow.schemas import schema_json

    def arrow_type(avro_type: Any, name: str) -> pa.DataType:
        if isinstance(avro_type, list):
            (inner,) = [t for t in avro_type if t != "null"]
            return arrow_type(inner, name)
        if isinstance(avro_type, dict):
            if avro_type["type"] == "record":
                # Nullable children: the record itself may be null.
                return pa.struct([pa.field(f["name"], arrow_type(f["type"], f["name"]))
                                  for f in avro_type["fields"]])
            return arrow_type(avro_type["type"], name)
        if avro_type == "bytes" and json_form:
            return pa.string()
        return {"string": pa.string(), "long": pa.int64(), "int": pa.int32(),
                "double": pa.float64(), "bytes": pa.binary(), "boolean": pa.bool_()}[avro_type]

    fields = schema_json("report")["fields"]
    return pa.schema([pa.field(f["name"], arrow_type(f["type"], f["name"]),
                               nullable=nullable or isinstance(f["type"], list)) for f in fields])


_PY_KIND = {
    "string": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "bytes": lambda v: isinstance(v, (bytes, bytearray)),
    "record": lambda v: isinstance(v, Mapping),
}
_INT_RANGE = {"int": (-(2**31), 2**31), "long": (-(2**63), 2**63)}


def _record_problem(record: Any, schema: pa.Schema) -> str | None:
    if not isinstance(record, Mapping):
        return f"malformed record: expected an object, got {type(record).__name__}"
    for field in schema:
        value = record.get(field.name)
        if value is None:
            continue  # missing fields are judged by the parse, with the others
        problem = _value_problem(value, field, field.name)
        if problem:
            return problem
        if pa.types.is_struct(field.type):
            for child in field.type:
                inner = value.get(child.name)
                if inner is None:
                    continue  # a missing nested field is judged by the parse
                problem = _value_problem(inner, child, f"{field.name}.{child.name}")
                if problem:
                    return problem
    return None


def _value_problem(value: Any, field: pa.Field, label: str) -> str | None:
    kind = field_kind(tuple(label.split(".")))
    if not _PY_KIND[kind](value):
        return (f"malformed record: field {label!r} must be {_KIND_NAME[kind]}, "
                f"got {type(value).__name__}")
    if kind == "string":
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800")
            return f"malformed record: field {label!r} is not valid UTF-8"
    if kind == "int":
        low, high = (-(2**63), 2**64) if label in UNSIGNED_FIELDS else (
            _INT_RANGE["int"] if pa.types.is_int32(field.type) else _INT_RANGE["long"])
        if not low <= value < high:
            return f"malformed record: field {label!r} is out of range: {value}"
    if kind == "float" and isinstance(value, int) and abs(value) >= 2**63:
        return f"malformed record: field {label!r} is out of range: {value}"
    return None


def _signed(value: Any) -> Any:
    """An unsigned 64-bit value as its two's-complement long (others as they are)."""
    return value - 2**64 if isinstance(value, int) and value >= 2**63 else value


def _signed_children(field: pa.Field, record: Any) -> Any:
    """A nested record with its :data:`UNSIGNED_FIELDS` as two's-complement longs."""
    if not isinstance(record, Mapping):
        return record
    names = [child.name for child in field.type
             if f"{field.name}.{child.name}" in UNSIGNED_FIELDS and child.name in record]
    return {**record, **{name: _signed(record[name]) for name in names}} if names else record


def records_to_table(records: Iterable[Any], source: str = "", ignore: Iterable[str] = ()
                     ) -> tuple[pa.Table, list[DeadLetter]]:
    """Records as Python objects (decoded JSON or Avro) -> an envelope table + dead letters.

    Each record's fields are checked against the report schema's types (no coercion); a
    record that fails is a dead letter, the others become rows of the table that
    :func:`parse_table` then checks like any other. Unknown fields are ignored (Avro's
    resolution rules), and so are the top-level fields named in ``ignore`` (as if the
    schema lacked them). ``seed`` and the other
    :data:`~ldpflow.wire.envelope.UNSIGNED_FIELDS` may be given signed or unsigned (64 bits).
    """
    schema = arrow_schema(nullable=True)
    ignore = set(ignore)
    if ignore:
        schema = pa.schema([f for f in schema if f.name not in ignore])
    good: list[Mapping] = []
    dead: list[DeadLetter] = []
    for record in records:
        problem = _record_problem(record, schema)
        if problem is None:
            good.append(record)
        else:
            dead.append(DeadLetter(source, problem, record))
    columns = {}
    for field in schema:
        values = [r.get(field.name) for r in good]
        if field.name in UNSIGNED_FIELDS:
            values = [_signed(v) for v in values]
        elif pa.types.is_struct(field.type) and any(
                f"{field.name}.{child.name}" in UNSIGNED_FIELDS for child in field.type):
            values = [_signed_children(field, v) for v in values]
        if field.name == "epsilon":
            values = [None if v is None else float(v) for v in values]
        columns[field.name] = pa.array(values, type=field.type)
    return pa.table(columns, schema=schema), dead
