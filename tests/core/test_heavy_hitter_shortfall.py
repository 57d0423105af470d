"""``shortfall``: a run that finds fewer heavy hitters than asked says how many and why."""

from __future__ import annotations

import numpy as np

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.heavy_hitters import PassFigures


def _figures(*passes):
    return [PassFigures(pass_index, label, 1000, candidates, survivors)
            for pass_index, (label, candidates, survivors) in enumerate(passes)]


def test_all_found_is_no_shortfall():
    assert hh.shortfall(8, 8, _figures(("segments", 64, 8), ("final test", 8, 8))) is None


def test_the_first_pass_that_kept_fewer_is_named_with_its_counts():
    figures = _figures(("segments", 512, 40), ("segment pairs", 300, 9), ("final test", 9, 9))
    assert hh.shortfall(9, 32, figures) == (
        "found 9 of the 32 heavy hitters asked for: pass 1 (segment pairs) kept 9 of its 300 "
        "candidates; the others fell below its threshold or were not valid values")


def test_too_few_candidates_names_what_they_were_formed_from():
    figures = _figures(("channel bits", 3, 3), ("final test", 3, 3))
    assert hh.shortfall(3, 32, figures) == (
        "found 3 of the 32 heavy hitters asked for: pass 0 (channel bits) had only 3 "
        "candidates, formed from its domain")
    figures = _figures(("pieces", 900, 40), ("final test", 5, 5))
    assert hh.shortfall(5, 32, figures).endswith(
        "pass 1 (final test) had only 5 candidates, formed from what pass 0 kept")


def test_a_run_of_mcm_with_few_channels_found_says_so():
    mcm = hh.make("mcm", top_k=32, value_bits=16, epsilon=2.0)
    rng = np.random.default_rng(5)
    values = rng.integers(0, 1 << 16, size=4000, dtype=np.uint64)
    reports = mcm.perturb(values, [f"user-{i}" for i in range(values.size)], rng=rng)
    state = mcm.initial_state()
    for pass_index in range(mcm.num_passes):
        state = mcm.advance(pass_index, mcm.accumulate(pass_index, reports, state), state)
    found = mcm.result(state).values.size
    assert found < 32  # uniform values: no heavy hitter stands out
    line = hh.shortfall(found, 32, state.figures)
    assert line.startswith(f"found {found} of the 32 heavy hitters asked for: pass ")
