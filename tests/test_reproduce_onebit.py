"""``benchmarks/reproduce_onebit.py --quick``: the seed-003 Figure 1 script runs and reports
every scheme on every distribution (the figure's five curves and six panels)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import numpy as np
import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "reproduce_onebit.py"


def load_script():
    spec = importlib.util.spec_from_file_location("reproduce_onebit", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # about 3 s alone, more on a loaded machine
def test_quick_run_emits_all_five_schemes_and_six_distributions(capsys, tmp_path):
    script = load_script()
    assert script.main(["--quick", "--figure", str(tmp_path / "f.png")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = [line for line in lines if "scheme" in line]
    assert {r["scheme"] for r in rows} == {"onebit", "grr", "sue", "hr", "ss"}
    assert {r["distribution"] for r in rows} == {
        "uniform", "geometric:0.8", "geometric:0.98", "zipf:0.5", "zipf:1.0", "two-step"}
    for r in rows:  # the projected estimate is a distribution: its l1 error is in [0, 2]
        assert 0 <= r["l1"] <= 2 and r["k"] == 1000 and r["epsilon"] == 1.0
    assert {r["bits"] for r in rows if r["scheme"] == "onebit"} == {1}
    summaries = {line["summary"]: line for line in lines if "summary" in line}
    assert set(summaries) == {r["distribution"] for r in rows} | {"all"}
    assert not (tmp_path / "f.png").exists()  # --quick writes nothing


def test_distributions_are_the_papers():
    script = load_script()
    k = 1000
    two = script.probabilities("two-step", k)
    np.testing.assert_allclose(two[:500], 1 / 2000)
    np.testing.assert_allclose(two[500:], 3 / 2000)
    geo = script.probabilities("geometric:0.8", k)
    np.testing.assert_allclose(geo[1:] / geo[:-1], 0.8)
    zipf = script.probabilities("zipf:0.5", k)
    np.testing.assert_allclose(zipf / zipf[0], np.arange(1, k + 1) ** -0.5)
    for spec in script.DISTRIBUTIONS:
        assert np.isclose(script.probabilities(spec, k).sum(), 1.0)


def test_chunked_one_bit_path_assigns_columns_across_chunks():
    """The chunked perturb-and-count path fills the columns j mod K, as one batch would,
    and every scheme counts all n users."""
    script = load_script()
    import ldpflow

    n = 3 * 1024 + 5
    counts = np.zeros(1000, dtype=np.int64)
    counts[[0, 7]] = [n - 100, 100]
    original = script.DEFAULT_CHUNK
    script.DEFAULT_CHUNK = 1000  # chunks that do not align with K = 1024
    try:
        for name in script.SCHEMES:
            oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=1000)
            acc = script.accumulate(oracle, counts, np.random.default_rng(0))
            assert acc.n == n
            if name == "onebit":
                np.testing.assert_array_equal(acc.counts[:1024],
                                              np.bincount(np.arange(n) % 1024))
    finally:
        script.DEFAULT_CHUNK = original
