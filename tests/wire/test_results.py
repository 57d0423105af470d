"""``estimate_result``: each post-processed estimate carries its own intervals."""

from __future__ import annotations

import json

import numpy as np

import ldpflow
from ldpflow.core import intervals, postprocess
from ldpflow.core.simulation import parse_distribution
from ldpflow.wire.results import estimate_result


def _accumulator(name: str = "olh", d: int = 64, n: int = 20_000):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(11)
    values = parse_distribution("zipf:1.1").sample(d, n, rng)
    return oracle, oracle.aggregate(oracle.perturb(values, rng=rng))


def test_results_carry_each_methods_bootstrap_intervals_reproducibly():
    oracle, acc = _accumulator()
    methods = ["base", "norm-sub", "base-cut", "power-ns", "norm-mul"]
    result = estimate_result(oracle.key, acc, 0, methods, postprocess.postprocess)
    assert set(result["method_intervals"]) == {"norm-sub", "base-cut"}
    assert set(result["method_intervals_missing"]) == {"power-ns", "norm-mul"}
    expected = intervals.bootstrap_intervals(oracle.estimate(acc), "norm-sub")
    own = result["method_intervals"]["norm-sub"]
    assert own["low"] == expected.low.tolist() and own["high"] == expected.high.tolist()
    assert own["replicates"] == 1000 and own["seed"] == expected.seed
    assert own["confidence"] == 0.95 and len(own["standard_errors"]) == 64
    for method, bounds in result["method_intervals"].items():
        f = result["estimates"][method]
        assert all(lo <= x <= hi for lo, x, hi in zip(bounds["low"], f, bounds["high"],
                                                       strict=True))
    # The old fields stay as they were: the raw estimate's.
    assert result["intervals"]["applies_to"] == "base"
    again = estimate_result(oracle.key, acc, 0, methods, postprocess.postprocess)
    assert json.dumps(again) == json.dumps(result)  # seeded from the data: same bytes


def test_a_method_that_cannot_apply_has_no_intervals_either():
    oracle, acc = _accumulator("onebit")
    result = estimate_result(oracle.key, acc, 0, ["base", "ibu", "norm-sub"],
                             postprocess.postprocess)
    assert "ibu" in result["method_errors"] and "ibu" not in result["method_intervals"]
    assert set(result["method_intervals"]) == {"norm-sub"}
