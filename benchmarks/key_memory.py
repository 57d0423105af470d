"""The memory one parameter set costs from its accumulator to its result, per domain value.

    python benchmarks/key_memory.py [--domain_size 65536] [--oracles grr,olh,oue,hr,ss]

For each oracle: 1000 reports over ``--domain_size`` values are counted, estimated and
post-processed with the default methods into the job's result dict, then JSON-encoded;
``tracemalloc`` peaks per domain value, one JSON object per oracle on stdout. This is what
``ldpflow.wire.parse.RESULT_BYTES_PER_VALUE`` (the policy's ``max_key_bytes`` budget) is
drawn from. Keys: oracle, domain_size, counters, accumulator_bytes_per_value,
result_bytes_per_value, json_chars_per_value, key_bytes_per_value (the policy's model).
"""

from __future__ import annotations

import argparse
import json
import tracemalloc

import numpy as np

import ldpflow
from ldpflow.core.postprocess import postprocess
from ldpflow.pipelines.options import DEFAULT_METHODS
from ldpflow.wire.parse import key_bytes
from ldpflow.wire.results import estimate_result


def measure(name: str, domain_size: int) -> dict:
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=domain_size)
    rng = np.random.default_rng(0)
    reports = oracle.perturb(rng.integers(0, domain_size, 1000), rng=rng)
    tracemalloc.start()
    accumulator = oracle.aggregate(reports)
    counted = tracemalloc.get_traced_memory()[1]
    result = estimate_result(oracle.key, accumulator, 0, DEFAULT_METHODS.split(","), postprocess)
    estimated = tracemalloc.get_traced_memory()[1]
    text = json.dumps(result)
    encoded = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"oracle": name, "domain_size": domain_size,
            "counters": int(accumulator.counts.size),
            "accumulator_bytes_per_value": round(counted / domain_size, 1),
            "result_bytes_per_value": round(max(estimated, encoded) / domain_size, 1),
            "json_chars_per_value": round(len(text) / domain_size, 1),
            "key_bytes_per_value": round(key_bytes(oracle) / domain_size, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain_size", type=int, default=65536)
    parser.add_argument("--oracles", default="grr,olh,oue,hr,ss")
    args = parser.parse_args()
    for name in args.oracles.split(","):
        print(json.dumps(measure(name, args.domain_size)))


if __name__ == "__main__":
    main()
