"""``estimates.csv`` benchmark: seconds and bytes of :func:`ldpflow.wire.results.estimates_csv`.

    python benchmarks/csv_output.py [--domain_sizes 1024,65536] [--methods base,norm-sub]

For each domain size, one OLH result (50,000 simulated reports, the methods asked for, their
bootstrap intervals) gets a label for every other value, and the CSV is written three times
(the best time is reported). Prints one JSON document: per domain size ``rows``, ``bytes``,
``seconds``, ``rows_per_second`` and ``labels_seconds`` (reading the label file back with
:func:`ldpflow.wire.labels.parse_value_labels`).
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

import ldpflow
from ldpflow.core import postprocess
from ldpflow.wire.labels import ValueLabels, parse_value_labels
from ldpflow.wire.results import (
    estimate_result,
    estimates_csv,
    estimates_document,
    run_metadata,
)


def one(d: int, methods: list[str]) -> dict:
    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(1)
    values = np.minimum(rng.zipf(1.1, size=50_000) - 1, d - 1)
    acc = oracle.aggregate(oracle.perturb(values, rng=rng))
    result = estimate_result(oracle.key, acc, 0, methods, postprocess.postprocess)
    labels = ValueLabels({v: f"https://example.org/item/{v}?q=a,b" for v in range(0, d, 2)})
    run = run_metadata(inputs="x", files=1, runner="bench", policy=None, methods=methods,
                       started="", value_labels=labels, formats=("csv",))
    document = estimates_document([result], {"total": 0}, True, run=run)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        data = estimates_csv(document)
        best = min(best, time.perf_counter() - started)
    text = "".join(f'{v},"{label}"\n' for v, label in labels.labels.items()).encode()
    started = time.perf_counter()
    parse_value_labels(text, "bench.csv", "csv")
    rows = d * len(methods)
    return {"domain_size": d, "rows": rows, "bytes": len(data), "seconds": round(best, 3),
            "rows_per_second": round(rows / best), "labels": len(labels),
            "labels_seconds": round(time.perf_counter() - started, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain_sizes", default="1024,65536")
    parser.add_argument("--methods", default="base,norm-sub")
    args = parser.parse_args()
    methods = args.methods.split(",")
    runs = [one(int(d), methods) for d in args.domain_sizes.split(",")]
    print(json.dumps({"benchmark": "csv_output", "python": platform.python_version(),
                      "methods": methods, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
