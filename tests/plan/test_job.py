"""The job plan's own parts (``ldpflow.plan.job``): the range size it picks for the
engine's workers, and the poisoning defence over pieces of the reports counted."""

from __future__ import annotations

import numpy as np
import pytest

import ldpflow
from ldpflow.core import poisoning
from ldpflow.core.keys import ProtocolKey
from ldpflow.plan import job, steps
from ldpflow.plan.backend import LocalBackend
from ldpflow.wire import formats
from ldpflow.wire.envelope import ReportBatch


def test_range_size_gives_each_worker_its_share_of_reads_within_bounds():
    assert job.range_size(256 << 20, 2) == 32 << 20  # 8 reads of 32 MiB: 4 per worker
    assert job.range_size(256 << 20, 1) == 64 << 20
    assert job.range_size(1 << 20, 8) == job.MIN_RANGE_BYTES  # never smaller
    assert job.range_size(1 << 40, 2) == formats.RANGE_BYTES  # never larger


def _attacked(name: str, seed: int):
    """Genuine reports of a Zipf-like population plus 10% fakes of a maximal gain attack."""
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=32)
    rng = np.random.default_rng(seed)
    values = np.minimum(rng.zipf(1.5, 6000) - 1, 31)
    genuine = oracle.perturb(values, rng=rng)
    fakes = poisoning.maximal_gain_attack(oracle, [20, 27], 600, rng)
    return oracle, type(genuine).concat([genuine, fakes])


@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_detect_poisoning_over_pieces_equals_the_defence_in_memory(name):
    oracle, reports = _attacked(name, 11)
    key = tuple(ProtocolKey.coerce(oracle.key))
    expected = poisoning.defend(oracle, reports).to_dict()
    assert 20 in expected["suspected"]  # the attack is seen: the sections are not trivial
    rng = np.random.default_rng(5)
    order = rng.permutation(len(reports))  # pieces of uneven sizes, in any order
    cuts = np.sort(rng.choice(np.arange(1, len(reports)), 9, replace=False))
    pieces = [(key, ReportBatch(oracle.key, reports[part]))
              for part in np.split(order, cuts)]
    pieces.insert(3, (key, ReportBatch(oracle.key, reports[:0])))  # an empty one
    sections = job.detect_poisoning(LocalBackend(), pieces, [key])
    assert sections == {key: expected}


def test_detect_poisoning_skips_keys_it_does_not_cover():
    oracle, reports = _attacked("grr", 3)
    key = tuple(ProtocolKey.coerce(oracle.key))
    hadamard = ldpflow.oracle("hr", epsilon=1.0, domain_size=32)  # no defence for hr
    other = tuple(ProtocolKey.coerce(hadamard.key))
    pieces = [(key, ReportBatch(oracle.key, reports)),
              (other, ReportBatch(hadamard.key, hadamard.perturb(np.arange(32),
                                                                 rng=np.random.default_rng(1))))]
    sections = job.detect_poisoning(LocalBackend(), pieces, [key, other])
    assert list(sections) == [key]
    result = {"oracle": "hr", "parameters": dict(ProtocolKey.coerce(other).parameters)}
    assert "error" in steps.attach_poisoning(result, sections)["poisoning"]
