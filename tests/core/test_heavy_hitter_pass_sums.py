"""``PassCounts`` as pure sums: ``a + b`` and ``a - b`` are new counts, exact, and leave
their inputs as they were (an engine may hand one result to several consumers)."""

from __future__ import annotations

import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from tests.core.heavy_hitter_contract import reports, split_pass


def _snapshot(counts: hh.PassCounts) -> hh.PassCounts:
    return counts.copy()


@pytest.mark.parametrize("name", sorted(hh.PROTOCOLS))
def test_pass_counts_add_and_subtract_exactly_without_changing_their_inputs(name):
    protocol, batch = reports(name, 3000, 4, 5)
    state = protocol.initial_state()
    part = split_pass(protocol, batch, 0)
    half = len(part) // 2
    a = protocol.accumulate(0, part[np.arange(half)], state)
    b = protocol.accumulate(0, part[np.arange(half, len(part))], state)
    whole = protocol.accumulate(0, part, state)
    before_a, before_b = _snapshot(a), _snapshot(b)
    total = a + b
    assert total == whole and total is not a and total is not b
    assert (total - b) == a and (total - a) == b
    assert a == before_a and b == before_b  # neither input changed
    assert all(x.dtype == np.int64 for x in total.arrays.values())
    assert total.group_counts.tolist() == whole.group_counts.tolist()


def test_subtracting_a_sum_the_counts_do_not_hold_is_refused():
    protocol, batch = reports("sfp", 2000, 4, 5)
    state = protocol.initial_state()
    empty = protocol.create_pass_counts(0, state)
    some = protocol.accumulate(0, split_pass(protocol, batch, 0), state)
    missing = set(some.arrays) - set(empty.arrays)
    if not missing:
        pytest.skip("this configuration allocates every sum up front")
    with pytest.raises(ValueError, match="do not hold"):
        _ = empty - some
