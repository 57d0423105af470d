"""Group check benchmark: the server's recomputation of each heavy-hitter report's group.

    python benchmarks/group_hash.py [--users 1000000,10000000] [--groups 4] [--repeat 3]
                                    [--parse_users 1000000]

For each ``--users`` count ``n``, string user ids ``user-0 .. user-{n-1}`` (as ``ldpflow
simulate`` writes them, one Arrow string column) get their group three ways:

* ``before``: what the parser did before group hash versions (``ids.to_pylist()``, then
  ``assign_groups`` of version 1: one BLAKE2b call per id in a Python loop);
* ``v1``: version 1 as the parser computes it now (BLAKE2b per id, from the column's bytes);
* ``v2``: version 2, the keyed string hash over the column's offsets and bytes at once.

With ``--parse_users`` (0: skip) it also times a whole parse (``parse_table``) of that many
PEM reports of each version, with the group check on and off. One JSON object per
measurement on stdout: ``case``, ``n``, ``best_s``, ``median_s`` and ``ns_per_id`` (from the
best of ``--repeat`` runs; the 10^7 ``before`` case runs once). The parser hashes large
columns in threads (``ldpflow.core.parallel``), so the figures depend on the free cores.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import numpy as np
import pyarrow as pa

from ldpflow.core import heavy_hitters as hh
from ldpflow.wire import formats
from ldpflow.wire.parse import AcceptancePolicy, _user_id_keys, parse_table


def _time(function, repeat: int) -> tuple[float, float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = function()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), out


def _column_groups(ids: pa.Array, groups: int, version: int) -> np.ndarray:
    """What the parser's group check computes (``ldpflow.wire.parse._group_mismatches``)."""
    return hh.groups_of_keys(_user_id_keys(ids, version), groups)


def group_cases(n: int, groups: int, repeat: int) -> list[dict]:
    ids = formats.numbered_ids("user-", 0, n)
    cases = {
        "before": lambda: hh.assign_groups(ids.to_pylist(), groups, group_hash=1),
        "v1": lambda: _column_groups(ids, groups, 1),
        "v2": lambda: _column_groups(ids, groups, 2),
    }
    out, results = [], {}
    for case, function in cases.items():
        runs = 1 if case == "before" and n >= 10**7 else repeat
        best, median, results[case] = _time(function, runs)
        out.append({"case": case, "n": n, "groups": groups, "runs": runs, "best_s": round(best, 4),
                    "median_s": round(median, 4), "ns_per_id": round(best / n * 1e9, 1)})
    if not np.array_equal(results["before"], results["v1"]):
        raise AssertionError("version 1 from the column's bytes differs from the former check")
    return out


def parse_cases(n: int, repeat: int) -> list[dict]:
    out = []
    users = formats.numbered_ids("user-", 0, n)
    report_ids = formats.numbered_ids("r-", 0, n)
    values = np.random.default_rng(1).integers(0, 2**32, n, dtype=np.uint64)
    for version in hh.GROUP_HASHES:
        protocol = hh.PrefixExtendingMethod(top_k=16, value_bits=32, epsilon=4.0,
                                            group_hash=version)
        reports = protocol.perturb(values, users.to_numpy(zero_copy_only=False),
                                   np.random.default_rng(2))
        table = formats.reports_table(protocol, reports, report_ids, users,
                                      np.zeros(n, dtype=np.int64))
        for check in (True, False):
            policy = AcceptancePolicy(expect={"oracle": "pem"}, check_groups=check)
            best, median, parsed = _time(functools.partial(parse_table, table, policy=policy),
                                         repeat)
            if parsed.reports != n:
                raise AssertionError(f"parse kept {parsed.reports} of {n} reports")
            out.append({"case": f"parse_v{version}_{'checked' if check else 'unchecked'}",
                        "n": n, "runs": repeat, "best_s": round(best, 4),
                        "median_s": round(median, 4), "ns_per_id": round(best / n * 1e9, 1)})
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", default="1000000,10000000")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parse_users", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    for n in (int(x) for x in args.users.split(",") if x):
        for row in group_cases(n, args.groups, args.repeat):
            print(json.dumps(row), flush=True)
    if args.parse_users:
        for row in parse_cases(args.parse_users, args.repeat):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
