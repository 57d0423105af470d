"""Result documents: what the jobs write, as plain JSON-ready Python values.

:func:`estimate_result` turns one key's accumulator into its result (estimates per
post-processing method), :func:`estimate_records` into Avro ``Estimate`` records,
:func:`estimates_document` gathers all keys with the run's accounting
(``records = reports_estimated + duplicates + dead_letters.total``), and
:func:`heavy_hitters_document` does the same for heavy hitters. NumPy stops here.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ldpflow.core.oracles import registry
from ldpflow.core.oracles.base import Accumulator, Estimate

__all__ = ["estimate_result", "estimate_records", "estimates_document",
           "heavy_hitters_document"]

_LOGGER = logging.getLogger(__name__)


def estimate_result(
    key: tuple,
    accumulator: Accumulator | None,
    dead_letters: int,
    methods: Sequence[str],
    postprocess_fn: Any,
    duplicates: int = 0,
) -> dict[str, Any]:
    """The JSON result of one key: parameters, counts and one estimate vector per method.

    ``duplicates`` counts the reports of the key dropped as repeated report ids.
    """
    oracle = registry.from_key(key)
    params = oracle.parameters
    result: dict[str, Any] = {
        "oracle": oracle.name, "epsilon": params["epsilon"], "domain_size": params["domain_size"],
        "parameters": params, "n": 0, "duplicates": int(duplicates),
        "dead_letters": int(dead_letters), "estimates": {},
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

def estimates_document(results: list[Mapping[str, Any]], dead_letters: Mapping[str, Any],
                       dedup: bool) -> dict[str, Any]:
    """The ``estimates.json`` document: every key's result (sorted by oracle and
    parameters) and the accounting of every input record."""
    results = sorted(results, key=lambda r: (r["oracle"], json.dumps(r["parameters"],
                                                                     sort_keys=True)))
    estimated = sum(r["n"] for r in results)
    duplicates = sum(r.get("duplicates", 0) for r in results)
    return {
        "results": list(results),
        "records": estimated + duplicates + int(dead_letters.get("total", 0)),
        "reports_estimated": estimated,
        "duplicates": duplicates,
        "deduplication": "report_id" if dedup else "none",
        "dead_letters": dict(dead_letters),
    }


def heavy_hitters_document(
    results: list[Mapping[str, Any]],
    dead_letters: Mapping[str, Any],
    elapsed_seconds: float | None = None,
    duplicates: int = 0,
) -> dict[str, Any]:
    """The ``heavy_hitters.json`` document of all keys' results.

    The top-level ``top_k``, ``configuration``, ``n``, ``group_sizes``, ``stages`` and
    ``error`` are those of the configuration with the most valid reports (the only one
    in the common case); ``results`` lists every configuration found, and
    ``records = reports + duplicates + dead letters`` counts every input record
    (``duplicates``: copies of a report id, counted once). ``warnings`` says when
    the input mixes configurations (several epsilons among them).
    """
    results = sorted(results, key=lambda r: (-r["n"], r["key"]))
    reports = sum(r["n"] for r in results)
    primary = results[0] if results and results[0]["n"] > 0 else None
    warnings = []
    present = [r for r in results if r["n"] > 0]
    if len(present) > 1:
        epsilons = sorted({(r.get("configuration") or {}).get("epsilon") for r in present},
                          key=str)
        warnings.append(
            f"the input holds {len(present)} PEM configurations (epsilon "
            f"{', '.join(map(str, epsilons))}); the top level reports the largest, 'results' "
            "lists all" + ("; a user who reported under several epsilons has spent their sum"
                           if len(epsilons) > 1 else ""))
        _LOGGER.warning("%s", warnings[-1])
    document: dict[str, Any] = {
        "top_k": primary["top_k"] if primary else [],
        "configuration": primary["configuration"] if primary else None,
        "n": primary["n"] if primary else 0,
        "group_sizes": primary["group_sizes"] if primary else [],
        "stages": primary["stages"] if primary else [],
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
