"""Records <-> columns: the boundary between report envelopes (Avro/JSON dicts) and numpy.

:func:`parse_records` turns a chunk of report records (dicts shaped by
``schemas/report.avsc``) into one :class:`ReportBatch` per oracle/parameter key, and a
dead letter (with its reason) for every record that no conforming client could have sent:
a malformed envelope, an unknown oracle, invalid or unexpected parameters, a missing or
ill-shaped payload, an out-of-domain payload. Every record ends up in exactly one of the
two, so ``records = reports + dead letters`` holds exactly.

Heavy-hitter reports (``oracle: "pem"``, the prefix extending method) are parsed only when
the caller expects them (``expect={"oracle": "pem", ...}``, as ``ldpflow heavy-hitters``
does); frequency estimation refuses them as dead letters. Their key is :func:`pem_key`:
the PEM configuration and the value codec, so reports of different configurations never mix.

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

from ldpflow.core import codecs
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.oracles import Reports, registry
from ldpflow.core.oracles.base import Accumulator, Estimate, FrequencyOracle
from ldpflow.core.validation import InvalidReportError

__all__ = [
    "ENVELOPE_FIELDS",
    "PAYLOAD_FIELDS",
    "PEM_PARAMETER_FIELDS",
    "pem_key",
    "pem_from_key",
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
    hh.NAME: ("seed", "bucket", "pem.group", "pem.prefix_bits"),  # pem.x: nested in ``pem``
}

#: The fields of a PEM report's ``pem`` record (``schemas/report.avsc``, ``PemReport``) that
#: configure it; with epsilon, hash_range and domain_size (= the number of groups) they make
#: its key. The record's other fields, ``group`` and ``prefix_bits``, are payload.
PEM_PARAMETER_FIELDS = ("value_bits", "top_k", "query_limit", "start_bits", "step_bits", "codec")

_ALL_PAYLOAD = ("value", "bits", "seed", "bucket", "column", "bit", "pem")


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
    def oracle(self) -> FrequencyOracle | hh.PrefixExtendingMethod:
        """The oracle of the key (a :class:`PrefixExtendingMethod` for PEM keys)."""
        if self.key[0] == hh.NAME:
            return pem_from_key(self.key)[0]
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
    if name == hh.NAME:
        codec = params.pop("codec", "int")
        return pem_key(hh.PrefixExtendingMethod(**params), codec)
    return registry.make(name, **params).key


def pem_key(pem: hh.PrefixExtendingMethod, codec: str | None = "int") -> tuple:
    """The key of PEM reports: the configuration's parameters and the value codec.

    ``("pem", (name, value), ...)`` sorted by name, like the oracles' keys; ``codec`` None
    means ``"int"``.
    """
    params = {**pem.parameters, "codec": codec or "int"}
    return (hh.NAME, *sorted(params.items()))


def pem_from_key(key: tuple) -> tuple[hh.PrefixExtendingMethod, str]:
    """The configuration and codec name of a :func:`pem_key`.

    Raises
    ------
    ValueError
        If ``key`` is not a PEM key.
    """
    if not isinstance(key, tuple) or not key or key[0] != hh.NAME:
        raise ValueError(f"key must be a {hh.NAME!r} key, got {key!r}")
    params = dict(key[1:])
    codec = params.pop("codec", "int")
    return hh.PrefixExtendingMethod(**params), codec


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
    fields = PAYLOAD_FIELDS[oracle.name]
    width = -(-oracle.domain_size // 8) if "bits" in fields else 0
    for field in fields:
        head, _, inner = field.partition(".")
        if inner:  # a field of a nested record (checked to be a mapping by the caller)
            column = [r[head].get(inner) for r in records]
        else:
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
    others = [f for f in _ALL_PAYLOAD if f not in {name.partition(".")[0] for name in fields}]
    extra = None
    if trusted:  # every field is present (schema defaults): one C-level getter per record
        # ... except fields added to the schema after a file was written: absent, not set.
        present = [f for f in others if f in records[0]]
        if present:
            getter, nones = operator.itemgetter(*present), (None,) * len(present)
            if len(present) == 1:
                nones = None
            try:
                got = list(map(getter, records))
            except KeyError:  # records of several schema versions: the general path
                got = None
            if got is not None:  # C-level map and count; rows only when some are set
                extra = [] if got.count(nones) == len(got) else [
                    i for i, v in enumerate(got) if v != nones]
        else:
            extra = []
    if extra is None:
        extra = [i for i, r in enumerate(records) if any(r.get(f) is not None for f in others)]
    for i in extra:
        if i not in bad:
            field = next(f for f in others if records[i].get(f) is not None)
            bad[i] = f"unexpected payload field {field!r} for oracle {oracle.name}"
    columns = {}
    for field, column in raw.items():
        values = [v for i, v in enumerate(column) if i not in bad] if bad else column
        field = field.rpartition(".")[2]
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
    groups = _group_by(group_keys, well_formed, source, dead)
    batches: dict[tuple, ReportBatch] = {}
    for chunk in groups.values():
        if chunk[0]["oracle"] == hh.NAME:
            _parse_pem(chunk, source, expect, trusted, envelope, cache, batches, dead)
            continue
        found = _oracle_for(chunk[0], cache)
        problem = found if isinstance(found, str) else _expectation_problem(found, expect)
        if problem is not None:
            key = None if isinstance(found, str) else found.key
            dead.extend(DeadLetter(source, problem, r, key) for r in chunk)
            continue
        _collect(found, found.key, chunk, source, trusted, envelope, batches, dead)
    return batches, dead


def _group_by(
    keys: list, records: list, source: str, dead: list[DeadLetter]
) -> dict[Any, list]:
    """Records by key; records whose key cannot be hashed (a JSON list or object where a
    number belongs) are dead letters."""
    try:
        if len(set(keys)) == 1:  # the common case: one key per chunk
            return {keys[0]: records}
    except TypeError:
        pass
    groups: dict[Any, list] = {}
    for gkey, record in zip(keys, records):
        try:
            groups.setdefault(gkey, []).append(record)
        except TypeError:
            dead.append(DeadLetter(source, "malformed record: a parameter field holds a list "
                                           "or an object", record, None))
    return groups


def _collect(
    oracle: FrequencyOracle | hh.PrefixExtendingMethod,
    key: tuple,
    chunk: list,
    source: str,
    trusted: bool,
    envelope: bool,
    batches: dict[tuple, ReportBatch],
    dead: list[DeadLetter],
) -> None:
    """Payload columns of one key's records -> a batch in ``batches``; the rest -> ``dead``."""
    columns, bad = _payload_columns(oracle, chunk, trusted)
    if bad:
        dead.extend(DeadLetter(source, reason, chunk[i], key) for i, reason in sorted(bad.items()))
        chunk = [r for i, r in enumerate(chunk) if i not in bad]
        if not chunk:
            return
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
            return
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


# -- heavy-hitter (PEM) reports -------------------------------------------------------------
_PEM_CONFIG_FIELDS = ("epsilon", "domain_size", "hash_range", *PEM_PARAMETER_FIELDS)


def _pem_for(config: tuple, cache: dict) -> tuple[hh.PrefixExtendingMethod, str, tuple] | str:
    """``(pem, codec, key)`` of one envelope configuration, or why it has none."""
    found = cache.get(("pem-config", config))
    if found is not None:
        return found
    fields = dict(zip(_PEM_CONFIG_FIELDS, config))
    missing = [name for name in PEM_PARAMETER_FIELDS if fields[name] is None]
    if missing:
        found = f"missing field 'pem.{missing[0]}' for oracle pem"
    else:
        params = {name: fields[name] for name in PEM_PARAMETER_FIELDS if name != "codec"}
        params["epsilon"] = fields["epsilon"]
        if fields["hash_range"] is not None:  # null: OLH's optimum for epsilon
            params["hash_range"] = fields["hash_range"]
        try:
            pem = hh.PrefixExtendingMethod(**params)
            codec = codecs.make_codec(fields["codec"], bits=pem.value_bits).name
        except (TypeError, ValueError) as exc:
            found = f"invalid parameters: {exc}"
        else:
            if fields["domain_size"] != pem.num_groups:
                found = (f"invalid parameters: domain_size of a pem report must be its number "
                         f"of groups, {pem.num_groups}; got {fields['domain_size']}")
            else:
                found = (pem, codec, pem_key(pem, codec))
    cache[("pem-config", config)] = found
    return found


def _pem_expectation_problem(
    pem: hh.PrefixExtendingMethod, codec: str, expect: Mapping[str, Any]
) -> str | None:
    params = {**pem.parameters, "codec": codec}
    for name, want in expect.items():
        if name != "oracle" and name in params and params[name] != want:
            return f"parameter mismatch: {name} {params[name]!r}, expected {want!r}"
    return None


def _parse_pem(
    chunk: list,
    source: str,
    expect: Mapping[str, Any] | None,
    trusted: bool,
    envelope: bool,
    cache: dict,
    batches: dict[tuple, ReportBatch],
    dead: list[DeadLetter],
) -> None:
    """PEM records (of one epsilon, domain size and hash range) -> batches per configuration."""
    if not expect or expect.get("oracle") != hh.NAME:
        reason = ("oracle 'pem' reports are heavy-hitter reports (ldpflow heavy-hitters), not "
                  "frequency-oracle reports")
        dead.extend(DeadLetter(source, reason, r, None) for r in chunk)
        return
    inner = [r.get("pem") for r in chunk]
    if None in inner or not trusted:
        kept = []
        for record, nested in zip(chunk, inner):
            if isinstance(nested, Mapping):
                kept.append(record)
            elif nested is None:
                dead.append(DeadLetter(source, "missing field 'pem' for oracle pem", record))
            else:
                dead.append(DeadLetter(source, "malformed record: field 'pem' must be an object, "
                                               f"got {type(nested).__name__}", record))
        chunk = kept
        inner = [r["pem"] for r in chunk]
        if not chunk:
            return
    outer = (chunk[0]["epsilon"], chunk[0]["domain_size"], chunk[0].get("hash_range"))
    if trusted:  # schema-decoded: every field of the nested record is present
        params_of = operator.itemgetter(*PEM_PARAMETER_FIELDS)
        configs = [outer + params_of(i) for i in inner]
    else:
        configs = [outer + tuple(i.get(f, "int" if f == "codec" else None)
                                 for f in PEM_PARAMETER_FIELDS) for i in inner]
    for config, records in _group_by(configs, chunk, source, dead).items():
        found = _pem_for(config, cache)
        if isinstance(found, str):
            dead.extend(DeadLetter(source, found, r, None) for r in records)
            continue
        pem, codec, key = found
        problem = _pem_expectation_problem(pem, codec, expect)
        if problem is not None:
            dead.extend(DeadLetter(source, problem, r, key) for r in records)
            continue
        _collect(pem, key, records, source, trusted, envelope, batches, dead)


def reports_to_records(
    oracle: FrequencyOracle | hh.PrefixExtendingMethod,
    reports: Reports,
    report_ids: Sequence[str],
    user_ids: Sequence[str],
    event_times: Sequence[int],
    *,
    codec: str | None = None,
) -> list[dict[str, Any]]:
    """Report envelopes (Avro-shaped dicts) for a batch of one oracle's reports.

    For a :class:`~ldpflow.core.heavy_hitters.PrefixExtendingMethod`, the envelope carries
    its configuration (``domain_size`` is its number of groups) and ``codec`` (default
    ``"int"``); the user ids must be those the reports' groups were drawn from.
    """
    empty = dict.fromkeys(_ALL_PAYLOAD)
    payload = reports.to_records()
    if isinstance(oracle, hh.PrefixExtendingMethod):
        base = {"oracle": hh.NAME, "epsilon": oracle.epsilon, "domain_size": oracle.num_groups,
                "hash_range": oracle.hash_range}
        config = {name: getattr(oracle, name) for name in PEM_PARAMETER_FIELDS if name != "codec"}
        config["codec"] = codecs.make_codec(codec or "int", bits=oracle.value_bits).name
        for fields in payload:  # group and prefix length go into the nested record
            fields["pem"] = {"group": fields.pop("group"),
                             "prefix_bits": fields.pop("prefix_bits"), **config}
    else:
        if codec is not None:
            raise ValueError(f"codec applies to pem reports only, got {codec!r} for "
                             f"{oracle.name}")
        base = {"oracle": oracle.name, "epsilon": oracle.epsilon,
                "domain_size": oracle.domain_size,
                "hash_range": getattr(oracle, "hash_range", None)}
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
