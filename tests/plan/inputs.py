"""Hostile report files for the plan's tests: two keys (OLH and GRR), users over a cap of 2,
exact and conflicting duplicates across files, and refused records of several reasons, in
Avro, gzipped JSON lines and Parquet."""

from __future__ import annotations

import gzip
import json

import numpy as np

import ldpflow
from tests import wire_support as formats
from tests.wire_support import reports_to_records

#: What the files hold (a test checks the plan's counts against it).
OLH_REPORTS, GRR_REPORTS = 900, 300
BROKEN_AVRO, BROKEN_JSON = 4, 2
EXACT_COPIES, CONFLICTING_COPIES = 100, 3


def _records(name, domain_size, n, seed, id_prefix, users):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=domain_size)
    rng = np.random.default_rng(seed)
    reports = oracle.perturb(rng.integers(0, domain_size, n), rng=rng)
    times = (np.arange(n) * 7919) % 1000  # users' reports in no particular time order
    return reports_to_records(oracle, reports, [f"{id_prefix}{i}" for i in range(n)],
                              [f"u{i % users}" for i in range(n)], times)


def write_inputs(folder) -> str:
    """Write the files into ``folder``; returns their glob."""
    olh = _records("olh", 64, OLH_REPORTS, 3, "r", 300)  # 3 reports per user
    grr = _records("grr", 16, GRR_REPORTS, 4, "g", 150)  # the same users, 2 more each
    broken = {7: dict(olh[7], bucket=99), 8: dict(olh[8], oracle="nope"),
              9: dict(olh[9], epsilon=0.0), 10: dict(olh[10], seed=None)}
    avro = [broken.get(i, r) for i, r in enumerate(olh[:450])] + grr[:150]
    with open(folder / "a.avro", "wb") as f:
        formats.write_avro(f, avro)
    lines = [json.dumps(formats.to_json_record(r)) for r in olh[450:] + grr[150:]]
    lines[3] = "{not json"
    lines[4] = json.dumps({"report_id": "x"})
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    copies = olh[500:500 + EXACT_COPIES]  # the same reports again (a file sent twice)
    conflicting = [dict(r, bucket=(r["bucket"] + 1) % 4) for r in olh[20:20 + CONFLICTING_COPIES]]
    formats.write_parquet(str(folder / "c.parquet"), copies + conflicting)
    return str(folder / "*.*")
