"""Result documents: what the jobs write, as plain JSON-ready Python values.

:func:`estimate_result` turns one key's accumulator into its result (estimates per
post-processing method, with the standard errors, confidence intervals, top values and
significant values of the raw estimate: ``docs/uncertainty.md``), :func:`estimate_records`
into Avro ``Estimate`` records, :func:`estimates_document` gathers all keys with the run's
accounting (``records = reports_estimated + duplicates + dead_letters.total``) and its
metadata (:func:`run_metadata`, with the run's value labels if it has any:
``ldpflow.wire.labels``), :func:`estimates_csv` writes that document as ``estimates.csv``
(one row per value and method), and :func:`heavy_hitters_document` does the same for heavy
hitters. NumPy stops here.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ldpflow.core import intervals
from ldpflow.core.oracles import registry
from ldpflow.core.oracles.base import Accumulator, Estimate

__all__ = ["estimate_result", "estimate_records", "estimates_document", "estimates_csv",
           "heavy_hitters_document", "run_metadata", "utc_now", "TOP_K", "MAX_SIGNIFICANT",
           "CSV_COLUMNS", "FORMATS"]

_LOGGER = logging.getLogger(__name__)

#: How many of the largest raw estimates a result lists under ``"top"``.
TOP_K = 20
#: The most values a result lists under ``"significant"`` (those of the largest estimates;
#: ``"significant_count"`` counts them all).
MAX_SIGNIFICANT = 1000
#: What the intervals are: the raw estimate's, whatever the post-processing methods.
INTERVAL_METHOD = ("normal approximation: f~ -/+ z se, se = sqrt(oracle variance at "
                   "clip(f~, 0, 1)); docs/uncertainty.md")


def utc_now() -> str:
    """The current time, UTC, ISO 8601 to the second (``2026-01-31T12:00:00Z``)."""
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    return now.isoformat().replace("+00:00", "Z")


#: What ``--format`` may ask for: ``json`` (``estimates.json`` and ``estimates.avro``, always
#: written) and ``csv`` (``estimates.csv`` too).
FORMATS = ("json", "csv")


def run_metadata(*, inputs: str, files: int | None, runner: str, policy: Any,
                 methods: Sequence[str], started: str, value_labels: Any = None,
                 formats: Sequence[str] = ("json",)) -> dict[str, Any]:
    """The ``"run"`` block of ``estimates.json`` (the writer adds ``"finished"``).

    ``policy`` is the run's :class:`~ldpflow.wire.parse.AcceptancePolicy` (or a mapping of
    its fields); ``started`` a :func:`utc_now` string. ``value_labels`` (a
    :class:`~ldpflow.wire.labels.ValueLabels`) adds ``"value_labels": {"version", "file",
    "count", "labels"}``, the dictionary the output's labels come from; ``formats`` with
    ``csv`` adds ``"formats": ["json", "csv"]``, which makes the writers add
    ``estimates.csv`` (:func:`estimates_csv`).
    """
    from ldpflow import __version__

    if dataclasses.is_dataclass(policy):
        fields = {f.name: getattr(policy, f.name) for f in dataclasses.fields(policy)
                  if f.repr}  # not the secret id-hash key
    else:
        fields = dict(policy or {})
    fields = {name: dict(value) if isinstance(value, Mapping) else value
              for name, value in fields.items()}
    block = {
        "ldpflow_version": __version__,
        "inputs": {"pattern": inputs, "files": None if files is None else int(files)},
        "runner": runner,
        "policy": fields,
        "methods": list(methods),
        "started": started,
    }
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise ValueError(f"formats must be among {', '.join(FORMATS)}, got {unknown}")
    if "csv" in formats:
        block["formats"] = [f for f in FORMATS if f == "json" or f in formats]
    if value_labels is not None:
        block["value_labels"] = value_labels.run_block()
    return block


def _run_labels(run: Mapping[str, Any] | None):
    """The :class:`~ldpflow.wire.labels.ValueLabels` a run block records, or None."""
    from ldpflow.wire.labels import ValueLabels

    block = (run or {}).get("value_labels")
    return ValueLabels.from_run_block(block) if block else None


def _labelled(result: Mapping[str, Any], labels) -> dict[str, Any]:
    """``result`` with a ``"label"`` in each of its ``top`` and ``significant`` entries whose
    value has one, and ``"value_labels_outside"`` counting the labels of values beyond its
    domain (a label file made for another domain: they label nothing here)."""
    out = dict(result)
    for name in ("top", "significant"):
        if name in out:
            out[name] = [{**entry, "label": labels.get(entry["value"])}
                         if labels.get(entry["value"]) is not None else entry
                         for entry in out[name]]
    size = result.get("domain_size")
    if isinstance(size, int):
        outside = sum(1 for v in labels.labels if v >= size)
        if outside:
            out["value_labels_outside"] = outside
            _LOGGER.warning("%d value labels name values outside [0, %d) of %s %s", outside,
                            size, result.get("oracle"), result.get("parameters"))
    return out


def _value_entries(values, interval: intervals.Intervals) -> list[dict[str, Any]]:
    return [{"value": int(v), "estimate": float(interval.estimates[v]),
             "se": float(interval.standard_errors[v]), "low": float(interval.low[v]),
             "high": float(interval.high[v])} for v in values]


def _add_uncertainty(result: dict[str, Any], estimate: Estimate, confidence: float,
                     top_k: int, max_significant: int) -> None:
    interval = intervals.confidence_intervals(estimate, confidence)
    result["standard_errors"] = interval.standard_errors.tolist()
    result["intervals"] = {"confidence": interval.confidence, "z": interval.z,
                           "applies_to": "base", "method": INTERVAL_METHOD,
                           "low": interval.low.tolist(), "high": interval.high.tolist()}
    result["top"] = _value_entries(intervals.top(interval, top_k), interval)
    significant, count = intervals.significant(interval, max_significant)
    result["significant"] = _value_entries(significant, interval)
    result["significant_count"] = count
    result["significant_by_chance"] = intervals.expected_false_positives(interval)


def estimate_result(
    key: tuple,
    accumulator: Accumulator | None,
    dead_letters: int,
    methods: Sequence[str],
    postprocess_fn: Any,
    duplicates: int = 0,
    capped: int = 0,
    confidence: float = intervals.DEFAULT_CONFIDENCE,
    top_k: int = TOP_K,
    max_significant: int = MAX_SIGNIFICANT,
) -> dict[str, Any]:
    """The JSON result of one key: parameters, counts and one estimate vector per method.

    ``duplicates`` counts the reports of the key dropped as repeated report ids, ``capped``
    those over their user's contribution cap.

    With reports, the result also holds the uncertainty of the raw (``base``) estimate,
    whichever methods were asked for (``docs/uncertainty.md``):

    * ``"standard_errors"``: one per value;
    * ``"intervals"``: ``{"confidence", "z", "applies_to": "base", "method", "low",
      "high"}``, ``estimate -/+ z se`` per value;
    * ``"top"``: the ``top_k`` largest raw estimates, largest first, each
      ``{"value", "estimate", "se", "low", "high"}``;
    * ``"significant"``: the values whose interval lies above 0, largest estimate first, at
      most ``max_significant`` of them (the largest); ``"significant_count"`` counts them
      all and ``"significant_by_chance"`` is ``d (1 - confidence) / 2``, how many noise
      alone would make significant if every frequency were 0.

    * ``"method_intervals"``: ``{method: {"confidence", "method", "replicates", "seed",
      "standard_errors", "low", "high"}}``, the intervals of each post-processed estimate
      (a seeded parametric bootstrap); ``"method_intervals_missing"``: ``{method: reason}``
      for those without (Power, PowerNS; a domain above 41,943 values).

    A method that cannot apply to the key's estimate (``ibu`` for the one-bit scheme) is left
    out of ``"estimates"`` and its reason given under ``"method_errors"``.
    """
    oracle = registry.from_key(key)
    params = oracle.parameters
    result: dict[str, Any] = {
        "oracle": oracle.name, "epsilon": params["epsilon"], "domain_size": params["domain_size"],
        "parameters": params, "n": 0, "duplicates": int(duplicates),
        "dead_letters": int(dead_letters), "estimates": {},
    }
    if capped:
        result["capped"] = int(capped)
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
    errors: dict[str, str] = {}
    for method in methods:
        try:
            result["estimates"][method] = postprocess_fn(estimate, method).tolist()
        except ValueError as exc:
            errors[method] = str(exc)
    if errors:
        result["method_errors"] = errors
    _add_uncertainty(result, estimate, confidence, top_k, max_significant)
    _add_method_intervals(result, estimate, confidence)
    return result


#: What the methods' own intervals are.
BOOTSTRAP_METHOD = ("parametric bootstrap: bias-corrected percentile interval of the method "
                    "applied to f~ + se Z; docs/uncertainty.md")


def _add_method_intervals(result: dict[str, Any], estimate: Estimate,
                          confidence: float) -> None:
    """``"method_intervals"``: each post-processed estimate's own intervals (the bootstrap of
    :func:`ldpflow.core.intervals.bootstrap_intervals`, seeded from the estimate, so reruns
    write the same numbers); the raw methods (``base``, ``post-pos``) have ``"intervals"``,
    and a method without them is named under ``"method_intervals_missing"`` with why."""
    found: dict[str, Any] = {}
    missing: dict[str, str] = {}
    d = int(estimate.frequencies.size)
    for method in result["estimates"]:
        if method in ("base", "post-pos"):
            continue
        replicates = intervals.default_replicates(method, d)
        if not replicates:
            missing[method] = (
                "no bootstrap for this method (its measured coverage is below nominal)"
                if method not in intervals.BOOTSTRAP_METHODS else
                f"the domain is too large for the bootstrap ({d} values)")
            continue
        try:
            out = intervals.bootstrap_intervals(estimate, method, confidence,
                                                replicates=replicates)
        except ValueError as exc:  # a replicate the method refuses: say so, keep the rest
            missing[method] = str(exc)
            continue
        found[method] = {"confidence": out.confidence, "method": BOOTSTRAP_METHOD,
                         "replicates": out.replicates, "seed": out.seed,
                         "standard_errors": out.standard_errors.tolist(),
                         "low": out.low.tolist(), "high": out.high.tolist()}
    result["method_intervals"] = found
    if missing:
        result["method_intervals_missing"] = missing


def estimate_records(result: Mapping[str, Any], window: tuple[int, int] | None = None,
                     pane: str | None = None, run: Mapping[str, Any] | None = None
                     ) -> list[dict[str, Any]]:
    """Avro ``Estimate`` records (one per method) of an :func:`estimate_result`.

    Every record carries the raw estimate's standard errors and interval bounds
    (``base_standard_errors``, ``base_interval_low``/``_high``, ``interval_confidence``;
    null for a result without them) and, given ``run`` (:func:`run_metadata`), the run's
    deterministic metadata only: ``ldpflow_version``, ``input_pattern``, ``input_files`` and
    ``methods``. Times stay out, so rerunning on the same input writes identical bytes.
    """
    bounds = result.get("intervals")
    inputs = (run or {}).get("inputs") or {}
    extra = {
        "base_standard_errors": ([float(x) for x in result["standard_errors"]]
                                 if "standard_errors" in result else None),
        "base_interval_low": [float(x) for x in bounds["low"]] if bounds else None,
        "base_interval_high": [float(x) for x in bounds["high"]] if bounds else None,
        "interval_confidence": float(bounds["confidence"]) if bounds else None,
        "ldpflow_version": run.get("ldpflow_version") if run else None,
        "input_pattern": inputs.get("pattern"),
        "input_files": inputs.get("files"),
        "methods": list(run["methods"]) if run and run.get("methods") is not None else None,
        **_avro_labels(run),
    }
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
            **extra,
        }
        for method, freqs in result["estimates"].items()
    ]


def _avro_labels(run: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Avro records' ``value_labels_version`` and ``value_labels`` (``{"VALUE": label}``),
    null without labels."""
    block = (run or {}).get("value_labels")
    if not block:
        return {"value_labels_version": None, "value_labels": None}
    return {"value_labels_version": block["version"], "value_labels": dict(block["labels"])}


#: The columns of ``estimates.csv``, one row per key, value and method.
CSV_COLUMNS = ("oracle", "epsilon", "domain_size", "parameters", "value", "label", "method",
               "estimate", "standard_error", "low", "high", "interval")


def _method_bounds(result: Mapping[str, Any], method: str):
    """``(standard errors, low, high, kind)`` of ``method``'s estimate in a result: its own
    bootstrap intervals, the raw estimate's for ``base``/``post-pos``; None without."""
    own = (result.get("method_intervals") or {}).get(method)
    if own:
        return own["standard_errors"], own["low"], own["high"], "bootstrap"
    raw = result.get("intervals")
    if method in ("base", "post-pos") and raw and "standard_errors" in result:
        return result["standard_errors"], raw["low"], raw["high"], "normal"
    return None


def _csv_numbers(values: Sequence[Any]) -> list[str]:
    """Each number as the shortest text that reads back as the same double."""
    return list(map(repr, map(float, values)))


def _csv_field(value: Any) -> str:
    """One field as :mod:`csv` (RFC 4180, minimal quoting) writes it."""
    text = io.StringIO(newline="")
    csv.writer(text, lineterminator="\r\n").writerow([value])  # \r and \n are special
    return text.getvalue()[:-2]


def estimates_csv(document: Mapping[str, Any]) -> bytes:
    """``estimates.csv`` of an :func:`estimates_document`: a header (:data:`CSV_COLUMNS`),
    then per result (in the document's order), value and method (in the result's order) one
    row: the key (``oracle``, ``epsilon``, ``domain_size``, ``parameters`` as compact JSON),
    the ``value``, its ``label`` (empty if it has none), the method's ``estimate``, its
    ``standard_error``, ``low`` and ``high`` (empty for a method without intervals) and
    which ``interval`` they are (``normal``: the raw estimate's; ``bootstrap``: the method's
    own). UTF-8 without a byte-order mark, RFC 4180 quoting (a label with a comma, a quote
    or a newline is quoted), ``\\r\\n`` line ends, numbers as Python's shortest round-trip
    text: the same document gives the same bytes.

    The fields are what :mod:`csv`'s writer makes of them: the key and each label are
    quoted once by it, and the numbers (which need no quoting) are formatted per column.
    """
    labels = _run_labels(document.get("run"))
    quoted = ({v: _csv_field(label) for v, label in labels.labels.items()}
              if labels is not None else {})
    lines = [",".join(CSV_COLUMNS)]
    for result in document.get("results", []):
        estimates = result.get("estimates") or {}
        key = ",".join(_csv_field(x) for x in (
            result["oracle"], repr(float(result["epsilon"])), int(result["domain_size"]),
            json.dumps(result["parameters"], sort_keys=True, separators=(",", ":"))))
        columns = []
        for method, freqs in estimates.items():
            bounds = _method_bounds(result, method)
            tail = [_csv_numbers(freqs)]
            if bounds:
                tail += [_csv_numbers(bounds[0]), _csv_numbers(bounds[1]),
                         _csv_numbers(bounds[2])]
            columns.append((_csv_field(method), tail, bounds[3] if bounds else ""))
        size = len(next(iter(estimates.values()), []))
        for value in range(size):
            head = f"{key},{value},{quoted.get(value, '')},"
            for method, tail, kind in columns:
                if len(tail) == 4:
                    lines.append(f"{head}{method},{tail[0][value]},{tail[1][value]},"
                                 f"{tail[2][value]},{tail[3][value]},{kind}")
                else:
                    lines.append(f"{head}{method},{tail[0][value]},,,,")
    return ("\r\n".join(lines) + "\r\n").encode("utf-8")


def estimates_document(results: list[Mapping[str, Any]], dead_letters: Mapping[str, Any],
                       dedup: bool, contribution: Mapping[str, Any] | None = None,
                       run: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``estimates.json`` document: every key's result (sorted by oracle and
    parameters) and the accounting of every input record:
    ``records = reports_estimated + duplicates + capped + dead_letters.total``.

    ``contribution`` (with a contribution cap): ``{"max_reports_per_user", "users",
    "max_epsilon_per_user"}``, to which the document adds ``reports_capped``. ``run``
    (:func:`run_metadata`, with ``"finished"``) becomes the document's ``"run"``; with
    ``"value_labels"`` there, each ``top`` and ``significant`` entry of a labelled value gets
    its ``"label"``.
    """
    results = sorted(results, key=lambda r: (r["oracle"], json.dumps(r["parameters"],
                                                                     sort_keys=True)))
    labels = _run_labels(run)
    if labels is not None:
        results = [_labelled(r, labels) for r in results]
    estimated = sum(r["n"] for r in results)
    duplicates = sum(r.get("duplicates", 0) for r in results)
    capped = sum(r.get("capped", 0) for r in results)
    document = {
        "results": list(results),
        "records": estimated + duplicates + capped + int(dead_letters.get("total", 0)),
        "reports_estimated": estimated,
        "duplicates": duplicates,
        "deduplication": "report_id" if dedup else "none",
        "dead_letters": dict(dead_letters),
    }
    if contribution is not None:
        document["contribution"] = {**contribution, "reports_capped": capped}
    if run is not None:
        document["run"] = dict(run)
    return document


def _protocol_name(result: Mapping[str, Any]) -> str:
    """The heavy-hitter protocol of one result (its key's ``oracle``; ``pem`` if unknown)."""
    try:
        key = json.loads(result["key"])
    except (KeyError, TypeError, ValueError):
        return "pem"
    return str(key.get("oracle", "pem")) if isinstance(key, dict) else "pem"


def heavy_hitters_document(
    results: list[Mapping[str, Any]],
    dead_letters: Mapping[str, Any],
    elapsed_seconds: float | None = None,
    duplicates: int = 0,
) -> dict[str, Any]:
    """The ``heavy_hitters.json`` document of all keys' results.

    The top-level ``top_k``, ``configuration``, ``n``, ``group_sizes``, ``passes`` and
    ``error`` are those of the configuration with the most valid reports (the only one
    in the common case); ``results`` lists every configuration found, and
    ``records = reports + duplicates + dead letters`` counts every input record
    (``duplicates``: copies of a report id, counted once). ``warnings`` says when
    the input mixes configurations (several epsilons among them); it names the protocol
    (``PEM``, ``SPM``, ...) when they share one. It also says, for each configuration that
    found fewer heavy hitters than its ``top_k``, how many and why (``shortfall``).
    """
    results = sorted(results, key=lambda r: (-r["n"], r["key"]))
    reports = sum(r["n"] for r in results)
    primary = results[0] if results and results[0]["n"] > 0 else None
    warnings = []
    present = [r for r in results if r["n"] > 0]
    if len(present) > 1:
        epsilons = sorted({(r.get("configuration") or {}).get("epsilon") for r in present},
                          key=str)
        names = sorted({_protocol_name(r) for r in present})
        label = names[0].upper() if len(names) == 1 else "heavy-hitter"
        warnings.append(
            f"the input holds {len(present)} {label} configurations (epsilon "
            f"{', '.join(map(str, epsilons))}); the top level reports the largest, 'results' "
            "lists all" + ("; a user who reported under several epsilons has spent their sum"
                           if len(epsilons) > 1 else ""))
        _LOGGER.warning("%s", warnings[-1])
    for result in present:
        if result.get("shortfall"):
            warnings.append(result["shortfall"] if len(present) == 1 else
                            f"{_protocol_name(result)} {result['key']}: {result['shortfall']}")
            _LOGGER.warning("%s", warnings[-1])
    document: dict[str, Any] = {
        "top_k": primary["top_k"] if primary else [],
        "configuration": primary["configuration"] if primary else None,
        "n": primary["n"] if primary else 0,
        "group_sizes": primary["group_sizes"] if primary else [],
        "passes": primary["passes"] if primary else [],
        "error": primary["error"] if primary else "no valid reports",
        "results": list(results),
        "records": reports + int(duplicates) + int(dead_letters.get("total", 0)),
        "reports": reports,
        "duplicates": int(duplicates),
        "dead_letters": dict(dead_letters),
        "warnings": warnings,
    }
    if elapsed_seconds is not None:
        document["elapsed_seconds"] = round(elapsed_seconds, 3)
    return document
