"""The SPM and MCM baselines: privacy budget, recovery on easy data, validation, query limit."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ldpflow.core import hashing
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.heavy_hitters import MultipleChannelMethod, SegmentPairsMethod
from ldpflow.core.oracles import OptimizedLocalHashing
from ldpflow.core.validation import InvalidReportError

SPM = SegmentPairsMethod
MCM = MultipleChannelMethod
HEAVY = np.array([0x0123456789ABCDEF, 0xFEDCBA9876543210, 0x0F0F0F0F0F0F0F0F, 42], dtype=np.uint64)


def easy_values(n, seed, bits=64):
    """Four dominant values (40/30/20/10 %)."""
    rng = np.random.default_rng(seed)
    top = HEAVY & np.uint64(2**bits - 1) if bits < 64 else HEAVY
    return top[rng.choice(4, size=n, p=[0.4, 0.3, 0.2, 0.1])]


# -- privacy --------------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0, 9.0])
def test_spm_budget_shares_sum_to_epsilon_and_are_tight(epsilon):
    spm = SPM(top_k=4, value_bits=32, epsilon=epsilon)
    shares = spm.budget_shares
    assert set(shares) == {"segment_a", "segment_b", "final"}
    assert math.isclose(sum(c["epsilon"] for c in shares.values()), epsilon, rel_tol=1e-12)
    for comp in shares.values():
        assert math.isclose(comp["p"] / comp["q"], math.exp(comp["epsilon"]), rel_tol=1e-12)
        olh = OptimizedLocalHashing(epsilon=comp["epsilon"], domain_size=2**16,
                                    hash_range=spm.hash_range)
        assert math.isclose(comp["p"], olh.p, rel_tol=1e-12)


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 6.0])
def test_mcm_channel_report_likelihood_ratio_is_exactly_its_share(epsilon):
    mcm = MCM(top_k=1, value_bits=8, epsilon=epsilon, num_channels=2)
    f = mcm.flip_probability
    width = 2 * mcm.num_channels
    outputs = np.array(list(itertools.product([0, 1], repeat=width)))
    probs = []
    for item in range(width):  # exact output distribution of the unary report
        onehot = np.zeros(width, dtype=int)
        onehot[item] = 1
        probs.append(np.prod(np.where(outputs == onehot, 1 - f, f), axis=1))
    probs = np.array(probs)
    worst = max((probs[a] / probs[b]).max() for a in range(width) for b in range(width))
    assert math.isclose(worst, math.exp(mcm.channel_epsilon), rel_tol=1e-9)
    shares = mcm.budget_shares
    assert math.isclose(sum(c["epsilon"] for c in shares.values()), epsilon, rel_tol=1e-12)
    for comp in shares.values():
        assert math.isclose(comp["p"] / comp["q"], math.exp(comp["epsilon"]), rel_tol=1e-12)


def test_mcm_perturb_flips_bits_at_the_stated_rate():
    mcm = MCM(top_k=2, value_bits=16, epsilon=2.0, num_channels=8)
    n = 20000
    values = np.random.default_rng(3).integers(0, 2**16, size=n, dtype=np.uint64)
    rep = mcm.perturb(values, np.arange(n), np.random.default_rng(4))
    bits = np.unpackbits(rep.columns["bits"], axis=1, count=16, bitorder="little")
    group = rep.columns["group"]
    item = 2 * mcm.channel_of(values) + ((values >> group.astype(np.uint64)) & np.uint64(1))
    truth = np.zeros_like(bits)
    truth[np.arange(n), item.astype(np.int64)] = 1
    flips = (bits != truth).mean()
    f = mcm.flip_probability
    assert abs(flips - f) < 5 * math.sqrt(f * (1 - f) / bits.size)


def test_spm_components_are_independent_olh_reports_of_the_right_segments():
    spm = SPM(top_k=2, value_bits=16, epsilon=3.0, num_segments=2)
    values = easy_values(4000, 1, bits=16)
    rep = spm.perturb(values, np.arange(values.size), np.random.default_rng(2))
    (shift_a, bits_a), (shift_b, bits_b) = spm.segment_bounds
    p = spm.budget_shares["final"]["p"]
    for seed, bucket, val, bits in (
        ("seed_a", "bucket_a", values >> np.uint64(shift_a), bits_a),
        ("seed_b", "bucket_b", values & np.uint64(2**bits_b - 1), bits_b),
        ("seed", "bucket", values, 16),
    ):
        hashed = hashing.hash_values(rep.columns[seed], val, bits, spm.hash_range)
        kept = (hashed == rep.columns[bucket]).mean()
        assert abs(kept - p) < 5 * math.sqrt(p * (1 - p) / values.size)


# -- recovery -------------------------------------------------------------------------------
@pytest.mark.parametrize("method", [SPM, MCM])
def test_recovers_dominant_heavy_hitters_on_easy_data(method):
    values = easy_values(60000, 5)
    model = method(top_k=4, value_bits=64, epsilon=8.0)
    result = model.identify(model.perturb(values, np.arange(values.size),
                                          np.random.default_rng(1)))
    assert result.values.tolist() == HEAVY.tolist()
    np.testing.assert_allclose(result.frequencies, [0.4, 0.3, 0.2, 0.1], atol=0.03)
    scores = hh.score_top_k(result.values, hh.true_top(values), 4)
    assert scores["f1"] == 1.0 and scores["ncr"] == 1.0


# -- query limit ----------------------------------------------------------------------------
def test_spm_never_estimates_more_than_the_query_limit():
    # Five 4-bit segments, each uniform over {0..3}: every pair of every segment is frequent,
    # so 4**5 = 1024 full values are consistent with the kept pairs, four times Q.
    rng = np.random.default_rng(8)
    digits = rng.integers(0, 4, size=(30000, 5)).astype(np.uint64)
    shifts = np.arange(4, -1, -1, dtype=np.uint64) * np.uint64(4)
    values = (digits << shifts).sum(axis=1, dtype=np.uint64)
    spm = SPM(top_k=8, value_bits=20, epsilon=8.0, num_segments=5, segment_top=16,
              query_limit=2**8)
    result = spm.identify(spm.perturb(values, np.arange(values.size), rng))
    segments, pairs, final = result.pass_candidates  # one figure per pass
    assert segments == 5 * 16  # segment_top values of each of the 5 segments
    assert pairs == 10 * 16**2  # each of the 10 pairs: segment_top**2 <= Q joint candidates
    assert final == 2**8  # the candidate set was cut to Q
    assert result.values.size == 8


def test_mcm_never_estimates_more_than_its_channels():
    values = easy_values(20000, 9, bits=32)
    mcm = MCM(top_k=4, value_bits=32, epsilon=4.0, num_channels=16, query_limit=16)
    result = mcm.identify(mcm.perturb(values, np.arange(values.size),
                                      np.random.default_rng(9)))
    assert max(result.pass_candidates) <= 16


# -- validation -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("method", "params", "pattern"),
    [
        (SPM, dict(top_k=0), r"top_k.*0"),
        (SPM, dict(epsilon=-1.0), r"epsilon.*-1\.0"),
        (SPM, dict(value_bits=65), r"value_bits.*65"),
        (SPM, dict(num_segments=1), r"num_segments.*1"),
        (SPM, dict(num_segments=2, query_limit=2**10), r"num_segments.*got 2"),
        (SPM, dict(segment_top=64, query_limit=2**11), r"segment_top.*got 64"),
        (MCM, dict(num_channels=0), r"num_channels.*0"),
        (MCM, dict(num_channels=300, query_limit=256), r"num_channels.*got 300"),
        (MCM, dict(query_limit=2**29), r"query_limit.*536870912"),
    ],
)
def test_bad_parameters_name_parameter_and_value(method, params, pattern):
    base = dict(top_k=4, value_bits=32, epsilon=1.0)
    base.update(params)
    with pytest.raises(ValueError, match=pattern):
        method(**base)


@pytest.mark.parametrize("method", [SPM, MCM])
def test_bad_values_and_foreign_reports_are_refused(method):
    model = method(top_k=2, value_bits=8, epsilon=1.0)
    with pytest.raises(ValueError, match=r"values must lie in \[0, 2\*\*8\), got 256"):
        model.perturb([1, 256], [1, 2], np.random.default_rng(0))
    pem = hh.PrefixExtendingMethod(top_k=2, value_bits=8, epsilon=1.0, query_limit=2**6)
    foreign = pem.perturb([1, 2], [1, 2], np.random.default_rng(0))
    with pytest.raises(InvalidReportError, match="pem"):
        model.identify(foreign)


def test_bad_report_rows_are_named():
    spm = SPM(top_k=2, value_bits=16, epsilon=1.0)
    rep = spm.perturb([1, 2, 3], [1, 2, 3], np.random.default_rng(0))
    rep.columns["bucket_b"][1] = spm.hash_range
    with pytest.raises(InvalidReportError, match="row 1: bucket_b outside"):
        spm.identify(rep)


# -- the passes -----------------------------------------------------------------------------
def test_spm_passes_count_segments_and_joint_supports_exactly():
    spm = SPM(top_k=3, value_bits=16, epsilon=4.0, num_segments=3)
    values = easy_values(6000, 11, bits=16)
    rep = spm.perturb(values, np.arange(values.size), np.random.default_rng(12))
    assert spm.num_passes == 3 and spm.server_options == {}
    assert [spm.pass_label(s) for s in range(3)] == ["segments", "segment pairs", "final test"]
    state = spm.initial_state()
    counts = spm.accumulate(0, rep, state)
    group, g = rep.columns["group"], spm.hash_range

    def supports(seeds, buckets, candidates, bits):
        """Report x candidate support, one hash evaluation at a time (int64 0/1)."""
        return np.stack([hashing.hash_values(seeds, np.full(seeds.size, c, dtype=np.uint64),
                                             bits, g) == buckets for c in candidates],
                        axis=1).astype(np.int64)

    for seg, (_, bits) in enumerate(spm.segment_bounds):
        expected = np.zeros(2**bits, dtype=np.int64)
        for pair_group, pair in enumerate(spm.pairs):
            if seg in pair:
                side = "a" if pair[0] == seg else "b"
                rows = group == pair_group
                expected += supports(rep.columns[f"seed_{side}"][rows],
                                     rep.columns[f"bucket_{side}"][rows],
                                     np.arange(2**bits, dtype=np.uint64), bits).sum(axis=0)
        np.testing.assert_array_equal(counts.arrays[f"segment_{seg}"], expected)
    state = spm.advance(0, counts, state)
    assert [x.size for x in state.data["kept"]] == [3, 3, 3]
    counts = spm.accumulate(1, rep, state)
    kept = state.data["kept"]
    for pair_group, (i, j) in enumerate(spm.pairs):
        rows = group == pair_group
        a = supports(rep.columns["seed_a"][rows], rep.columns["bucket_a"][rows], kept[i],
                     spm.segment_bounds[i][1])
        b = supports(rep.columns["seed_b"][rows], rep.columns["bucket_b"][rows], kept[j],
                     spm.segment_bounds[j][1])
        assert counts.arrays[f"joint_{pair_group}"].dtype == np.int64
        np.testing.assert_array_equal(counts.arrays[f"joint_{pair_group}"], a.T @ b)
        np.testing.assert_array_equal(counts.arrays[f"fi_{pair_group}"], a.sum(axis=0))
        np.testing.assert_array_equal(counts.arrays[f"fj_{pair_group}"], b.sum(axis=0))
    state = spm.advance(1, counts, state)
    assert state.figures[1].candidates == 3 * 3 * 3  # segment_top**2 per pair, 3 pairs
    # segment_top = 3 keeps the three heaviest values (40, 30, 20 %) and nothing else
    np.testing.assert_array_equal(np.sort(state.data["candidates"]),
                                  np.sort(HEAVY[:3] & np.uint64(0xFFFF)))
    assert state.figures[1].survivors == 3


def test_mcm_passes_count_ones_per_bit_position_exactly():
    mcm = MCM(top_k=2, value_bits=8, epsilon=4.0, num_channels=8)
    values = easy_values(3000, 13, bits=8)
    rep = mcm.perturb(values, np.arange(values.size), np.random.default_rng(14))
    assert mcm.num_passes == 2 and mcm.server_options == {}
    counts = mcm.accumulate(0, rep, mcm.initial_state())
    bits = np.unpackbits(rep.columns["bits"], axis=1, count=16, bitorder="little")
    expected = np.zeros((8, 16), dtype=np.int64)
    np.add.at(expected, rep.columns["group"], bits.astype(np.int64))
    np.testing.assert_array_equal(counts.arrays["ones"], expected)
    state = mcm.advance(0, counts, mcm.initial_state())
    candidates = state.data["candidates"]
    assert np.all(np.diff(candidates.astype(np.int64)) > 0)  # distinct, ascending
    assert state.figures[0].candidates == 8 and state.figures[0].survivors == candidates.size
