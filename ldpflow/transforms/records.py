"""Records <-> columns: the boundary between report envelopes (Avro/JSON dicts) and numpy.

:func:`parse_records` turns a chunk of report records (dicts shaped by
``schemas/report.avsc``) into one :class:`ReportBatch` per oracle/parameter key, and a
dead letter (with its reason) for every record that no conforming client could have sent:
a malformed envelope, an unknown oracle, invalid or unexpected parameters, a missing or
ill-shaped payload, an out-of-domain payload. Every record ends up in exactly one of the
two, so ``records = reports + dead letters`` holds exactly.

:func:`estimate_record` and :func:`estimate_result` turn estimates into plain Python
values for the Avro and JSON writers; NumPy stops here.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ldpflow.core.oracles import Reports, registry
from ldpflow.core.oracles.base import Accumulator, Estimate, FrequencyOracle
from ldpflow.core.validation import InvalidReportError

__all__ = [
    "ENVELOPE_FIELDS",
    "PAYLOAD_FIELDS",
    "ReportBatch",
    "DeadLetter",
    "parse_records",
    "reports_to_records",
    "key_to_json",
    "key_from_json",
    "json_safe",
    "estimate_result",
    "estimate_records",
]

ENVELOPE_FIELDS: dict[str, tuple[type, ...]] = {
    "report_id": (str,),
    "user_id": (str,),
    "event_time": (int,),
    "oracle": (str,),
    "epsilon": (float, int),
    "domain_size": (int,),
}

#: The envelope's payload fields of each oracle (its wire form, ORACLES.md).
PAYLOAD_FIELDS: dict[str, tuple[str, ...]] = {
    "grr": ("value",),
    "hr": ("value",),
    "oue": ("bits",),
    "sue": ("bits",),
    "ss": ("bits",),
    "olh": ("seed", "bucket"),
    "blh": ("seed", "bucket"),
    "onebit": ("column", "bit"),
}

_ALL_PAYLOAD = ("value", "bits", "seed", "bucket", "column", "bit")


@dataclasses.dataclass(eq=False)
class ReportBatch:
    """Valid reports of one key with their envelopes: the unit the Beam layer moves around.

    Attributes
    ----------
    key : tuple
        ``oracle.key``: the oracle name and its parameters.
    reports : Reports
        The payload columns.
    report_ids, user_ids : ndarray of object (str), or None
    event_times : ndarray of int64 (milliseconds since the epoch), or None
        The envelope, kept when the reader is asked to (deduplication, windows, groups).
    """

    key: tuple
    reports: Reports
    report_ids: np.ndarray | None = None
    user_ids: np.ndarray | None = None
    event_times: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.reports)

    def __getitem__(self, index: slice | np.ndarray) -> ReportBatch:
        def pick(column: np.ndarray | None) -> np.ndarray | None:
            return None if column is None else column[index]

        return ReportBatch(self.key, self.reports[index], pick(self.report_ids),
                           pick(self.user_ids), pick(self.event_times))

    @property
    def oracle(self) -> FrequencyOracle:
        return registry.from_key(self.key)

    @classmethod
    def concat(cls, batches: Sequence[ReportBatch]) -> ReportBatch:
        key = batches[0].key
        if any(b.key != key for b in batches):
            raise ValueError("cannot concatenate report batches of different keys")
        def join(name: str) -> np.ndarray | None:
            columns = [getattr(b, name) for b in batches]
            return None if any(c is None for c in columns) else np.concatenate(columns)

        return cls(key, Reports.concat([b.reports for b in batches]), join("report_ids"),
                   join("user_ids"), join("event_times"))


@dataclasses.dataclass
class DeadLetter:
    """A refused record: where it came from, why, and the record itself (JSON-safe)."""

    source: str
    reason: str
    record: Any
    key: tuple | None = None

    def to_json(self) -> str:
        return json.dumps({"source": self.source, "reason": self.reason,
                           "key": key_to_json(self.key) if self.key else None,
                           "record": json_safe(self.record)}, sort_keys=True)


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


def key_to_json(key: tuple) -> str:
    """A stable text form of a key (for file names, messages and joins)."""
    name, *items = key
    return json.dumps({"oracle": name, **dict(items)}, sort_keys=True)


def key_from_json(text: str) -> tuple:
    params = json.loads(text)
    name = params.pop("oracle")
    return registry.make(name, **params).key


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _envelope_problem(record: Any) -> str | None:
    if not isinstance(record, Mapping):
        return f"malformed record: expected an object, got {type(record).__name__}"
    for name, types in ENVELOPE_FIELDS.items():
        value = record.get(name)
        if value is None:
            return f"malformed record: missing field {name!r}"
        ok = _is_int(value) if types == (int,) else (
            isinstance(value, types) and not isinstance(value, bool))
        if not ok:
            return (f"malformed record: field {name!r} must be "
                    f"{'/'.join(t.__name__ for t in types)}, got {type(value).__name__}")
    return None


def _oracle_for(record: Mapping, cache: dict) -> FrequencyOracle | str:
    """The oracle of a record's parameters, or the reason it has none."""
    group = (record["oracle"], record["epsilon"], record["domain_size"], record.get("hash_range"))
    found = cache.get(group)
    if found is None:
        name = record["oracle"]
        if name not in registry.ORACLES:
            found = f"unknown oracle {name!r} (known: {' '.join(registry.ORACLES)})"
        else:
            params: dict[str, Any] = {"epsilon": float(record["epsilon"]),
                                      "domain_size": int(record["domain_size"])}
            if name in ("olh", "blh") and record.get("hash_range") is not None:
                params["hash_range"] = record["hash_range"]
            elif record.get("hash_range") is not None:
                found = f"invalid parameters: {name} takes no hash_range"
            if found is None:
                try:
                    found = registry.make(name, **params)
                except (TypeError, ValueError) as exc:
                    found = f"invalid parameters: {exc}"
        cache[group] = found
    return found


def _expectation_problem(oracle: FrequencyOracle, expect: Mapping[str, Any] | None) -> str | None:
    if not expect:
        return None
    if "oracle" in expect and expect["oracle"] != oracle.name:
        return f"parameter mismatch: oracle {oracle.name!r}, expected {expect['oracle']!r}"
    params = oracle.parameters
    for name, want in expect.items():
        if name != "oracle" and name in params and params[name] != want:
            return f"parameter mismatch: {name} {params[name]!r}, expected {want!r}"
    return None


def _int_column(values: list, unsigned64: bool = False) -> np.ndarray:
    if not unsigned64:
        return np.array(values, dtype=np.int64)
    # The seed: Avro carries it as a two's-complement long, JSON may carry it unsigned.
    try:
        return np.array(values, dtype=np.int64).view(np.uint64)
    except OverflowError:
        return np.array([v & 0xFFFFFFFFFFFFFFFF for v in values], dtype=np.uint64)


def _field_problem(oracle: FrequencyOracle, field: str, value: Any) -> str | None:
    """Why one payload value cannot be part of a report of ``oracle`` (None: it can)."""
    if value is None:
        return f"missing payload field {field!r} for oracle {oracle.name}"
    if field == "bits":
        width = -(-oracle.domain_size // 8)
        if not isinstance(value, (bytes, bytearray)):
            return f"payload field 'bits' must be bytes, got {type(value).__name__}"
        if len(value) != width:
            return (f"payload 'bits' has {len(value)} bytes, expected {width} "
                    f"for domain_size {oracle.domain_size}")
        return None
    if not _is_int(value):
        return f"payload field {field!r} must be an integer, got {type(value).__name__}"
    low, high = (-(2**63), 2**64) if field == "seed" else (-(2**63), 2**63)
    if not low <= value < high:
        return f"payload field {field!r} is out of range: {value}"
    return None


def _payload_columns(
    oracle: FrequencyOracle, records: list[Mapping], trusted: bool
) -> tuple[dict[str, np.ndarray], dict[int, str]]:
    """Payload columns of the well-formed ``records`` and the reason of each ill-formed one.

    ``trusted`` records come from a schema-checked decoder (Avro): their field types are
    known, so only missing values and byte lengths are checked row by row.
    """
    bad: dict[int, str] = {}
    raw: dict[str, list] = {}
    width = -(-oracle.domain_size // 8)
    for field in PAYLOAD_FIELDS[oracle.name]:
        column = [r.get(field) for r in records]
        raw[field] = column
        suspicious = (not trusted or None in column
                      or (field == "bits" and set(map(len, column)) != {width}))
        if suspicious:
            for i, value in enumerate(column):
                if i not in bad:
                    problem = _field_problem(oracle, field, value)
                    if problem:
                        bad[i] = problem
    others = [f for f in _ALL_PAYLOAD if f not in raw]
    if trusted:  # every field is present (schema defaults): one C-level getter per record
        getter, nones = operator.itemgetter(*others), (None,) * len(others)
        if len(others) == 1:
            nones = None
        extra = [i for i, r in enumerate(records) if getter(r) != nones]
    else:
        extra = [i for i, r in enumerate(records) if any(r.get(f) is not None for f in others)]
    for i in extra:
        if i not in bad:
            field = next(f for f in others if records[i].get(f) is not None)
            bad[i] = f"unexpected payload field {field!r} for oracle {oracle.name}"
    columns = {}
    for field, column in raw.items():
        values = [v for i, v in enumerate(column) if i not in bad] if bad else column
        if field == "bits":
            columns[field] = np.frombuffer(b"".join(values), dtype=np.uint8).reshape(-1, width).copy()
        else:
            columns[field] = _int_column(values, unsigned64=field == "seed")
    return columns, bad


def parse_records(
    records: Iterable[Any],
    *,
    source: str = "",
    expect: Mapping[str, Any] | None = None,
    trusted: bool = False,
    envelope: bool = True,
) -> tuple[dict[tuple, ReportBatch], list[DeadLetter]]:
    """Split report records into valid batches per key and dead letters with reasons.

    Parameters
    ----------
    records : iterable of dict
        Report envelopes (``schemas/report.avsc``); bytes fields as ``bytes``.
    source : str
        Where the records came from (a file name), copied into each dead letter.
    expect : mapping, optional
        Required parameters (``oracle``, ``epsilon``, ``domain_size``, ...); records with
        other values are dead letters ("parameter mismatch").
    trusted : bool
        The records were decoded against the report schema (Avro), so the envelope's field
        types need no check; JSON records are checked field by field.
    envelope : bool
        Keep report ids, user ids and event times in the batches (batch estimation needs
        none of them).

    Returns
    -------
    batches : dict
        ``oracle.key -> ReportBatch`` of the valid reports.
    dead : list of DeadLetter
        Every other record, with the reason it was refused.
    """
    records = records if isinstance(records, list) else list(records)
    dead: list[DeadLetter] = []
    cache: dict = {}
    if trusted:
        well_formed = records
    else:
        well_formed = []
        for record in records:
            problem = _envelope_problem(record)
            if problem is None:
                well_formed.append(record)
            else:
                dead.append(DeadLetter(source, problem, record, None))
    if trusted:
        group_of = operator.itemgetter("oracle", "epsilon", "domain_size", "hash_range")
        group_keys = [group_of(r) for r in well_formed]
    else:
        group_keys = [(r["oracle"], r["epsilon"], r["domain_size"], r.get("hash_range"))
                      for r in well_formed]
    if len(set(group_keys)) == 1:  # the common case: one key per chunk
        groups = {group_keys[0]: well_formed}
    else:
        groups = {}
        for gkey, record in zip(group_keys, well_formed):
            groups.setdefault(gkey, []).append(record)
    batches: dict[tuple, ReportBatch] = {}
    for chunk in groups.values():
        found = _oracle_for(chunk[0], cache)
        problem = found if isinstance(found, str) else _expectation_problem(found, expect)
        if problem is not None:
            key = None if isinstance(found, str) else found.key
            dead.extend(DeadLetter(source, problem, r, key) for r in chunk)
            continue
        oracle, key = found, found.key
        columns, bad = _payload_columns(oracle, chunk, trusted)
        if bad:
            dead.extend(DeadLetter(source, reason, chunk[i], key) for i, reason in sorted(bad.items()))
            chunk = [r for i, r in enumerate(chunk) if i not in bad]
            if not chunk:
                continue
        reports = oracle.coerce_reports(Reports(oracle.name, columns))
        rows, reasons = oracle.invalid_rows(reports)
        if rows.size:
            dead.extend(DeadLetter(source, reason, chunk[row], key)
                        for row, reason in zip(rows.tolist(), reasons))
            keep = np.ones(len(chunk), dtype=bool)
            keep[rows] = False
            reports = reports[keep]
            chunk = [r for r, k in zip(chunk, keep) if k]
            if not chunk:
                continue
        if envelope:
            batch = ReportBatch(
                key,
                reports,
                np.array([r["report_id"] for r in chunk], dtype=object),
                np.array([r["user_id"] for r in chunk], dtype=object),
                np.array([r["event_time"] for r in chunk], dtype=np.int64),
            )
        else:
            batch = ReportBatch(key, reports)
        batches[key] = ReportBatch.concat([batches[key], batch]) if key in batches else batch
    return batches, dead


def reports_to_records(
    oracle: FrequencyOracle,
    reports: Reports,
    report_ids: Sequence[str],
    user_ids: Sequence[str],
    event_times: Sequence[int],
) -> list[dict[str, Any]]:
    """Report envelopes (Avro-shaped dicts) for a batch of one oracle's reports."""
    base = {"oracle": oracle.name, "epsilon": oracle.epsilon, "domain_size": oracle.domain_size,
            "hash_range": getattr(oracle, "hash_range", None)}
    empty = dict.fromkeys(_ALL_PAYLOAD)
    payload = reports.to_records()
    out = []
    for rid, uid, t, fields in zip(report_ids, user_ids, np.asarray(event_times).tolist(), payload):
        record = {"report_id": rid, "user_id": uid, "event_time": t, **base, **empty, **fields}
        if "seed" in fields:  # Avro long: two's complement
            s = fields["seed"]
            record["seed"] = s - 2**64 if s >= 2**63 else s
        out.append(record)
    return out


def estimate_result(
    key: tuple,
    accumulator: Accumulator | None,
    dead_letters: int,
    methods: Sequence[str],
    postprocess_fn: Any,
) -> dict[str, Any]:
    """The JSON result of one key: parameters, counts and one estimate vector per method."""
    oracle = registry.from_key(key)
    params = oracle.parameters
    result: dict[str, Any] = {
        "oracle": oracle.name, "epsilon": params["epsilon"], "domain_size": params["domain_size"],
        "parameters": params, "n": 0, "dead_letters": int(dead_letters), "estimates": {},
    }
    if accumulator is None or accumulator.n == 0:
        result["error"] = "no valid reports"
        return result
    result["n"] = int(accumulator.n)
    try:
        estimate: Estimate = oracle.estimate(accumulator)
    except ValueError as exc:
        result["error"] = str(exc)
        return result
    result["sigma"] = float(estimate.sigma)
    for method in methods:
        result["estimates"][method] = postprocess_fn(estimate, method).tolist()
    return result


def estimate_records(result: Mapping[str, Any], window: tuple[int, int] | None = None,
                     pane: str | None = None) -> list[dict[str, Any]]:
    """Avro ``Estimate`` records (one per method) of an :func:`estimate_result`."""
    return [
        {
            "window_start": window[0] if window else None,
            "window_end": window[1] if window else None,
            "oracle": result["oracle"],
            "epsilon": float(result["epsilon"]),
            "domain_size": int(result["domain_size"]),
            "parameters": {k: json.dumps(v) for k, v in result["parameters"].items()},
            "n": int(result["n"]),
            "dead_letters": int(result["dead_letters"]),
            "method": method,
            "frequencies": [float(x) for x in freqs],
            "sigma": float(result.get("sigma", math.nan)),
            "pane": pane,
        }
        for method, freqs in result["estimates"].items()
    ]
