"""The poisoning test of the heavy-hitter passes (``ServerRule(poisoning="detect")``):
from the merged pass counts, equal to the core's in-memory defence in any shard order; a
protocol without a defence says so."""

from __future__ import annotations

import numpy as np
import pytest

from ldpflow.core import poisoning
from ldpflow.transforms import heavy_hitters as thh
from tests.transforms.test_heavy_hitters import (
    SMALL,
    batches_of,
    protocol_of,
    run_passes,
    skewed,
)

DETECT = thh.ServerRule(prune=False, poisoning="detect")


def passes(name, order=(0, 1, 2), rule=DETECT, n=6000):
    protocol = protocol_of(name)
    values = skewed(n, 6)
    reports = protocol.perturb(values, [f"u{i}" for i in range(n)], np.random.default_rng(60))
    key, batches = batches_of(protocol, reports, list(range(150, n, 150)))
    outcomes = run_passes(protocol, key, batches, list(order), rule=rule, name=name)
    return protocol, reports, thh.assemble_result((key, outcomes), protocol.num_passes, rule)


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 0, 1)])
def test_the_pem_section_equals_the_core_defence_in_any_shard_order(order):
    protocol, reports, out = passes("pem", order)
    assert out["poisoning"] == poisoning.defend_prefixes(protocol, reports)
    assert [s["n"] for s in out["poisoning"]["details"]["passes"]] == out["group_sizes"]
    # three heavy values (30%, 20%, 15%) are honest: no alarm
    assert out["poisoning"]["alarm"] is False


@pytest.mark.parametrize("name", sorted(set(SMALL) - {"pem"}))
def test_a_protocol_without_a_defence_says_so(name):
    _, _, out = passes(name, n=3000)
    assert out["poisoning"] == {
        "error": f"no poisoning defence for heavy-hitter protocol {name!r}; it covers pem"}


def test_without_detect_there_is_no_section():
    _, _, out = passes("pem", rule=thh.ServerRule(prune=False))
    assert "poisoning" not in out


def test_the_rule_refuses_an_unknown_poisoning_value():
    with pytest.raises(ValueError, match="poisoning must be one of none detect, got 'recover'"):
        thh.ServerRule(poisoning="recover")
