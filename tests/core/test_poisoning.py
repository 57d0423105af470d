"""Poisoning attacks and defences (ldpflow.core.poisoning): exact laws checked by enumeration,
false-positive rates in their binomial bands, detection of the attacks, recovery of the
estimates within k-sigma of the genuine frequencies."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

import ldpflow
from ldpflow.core import bitvectors, poisoning, simulation
from ldpflow.core.oracles import Reports

D = 256
N = 20_000
TARGET = 200


def population(seed: int, n: int = N, d: int = D) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return simulation.RankDistribution("zipf", 1.1).sample(d, n, rng)


def attacked(name: str, seed: int, beta: float = 0.05, targets=(TARGET,), **attack):
    """(oracle, genuine values, genuine reports, fake reports, all reports)."""
    rng = np.random.default_rng(seed)
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=D)
    values = population(seed + 1)
    genuine = oracle.perturb(values, rng)
    fakes = poisoning.maximal_gain_attack(oracle, list(targets),
                                          poisoning.fake_user_count(N, beta), rng, **attack)
    return oracle, values, genuine, fakes, Reports.concat([genuine, fakes])


def passes(oracle, reports):
    """The plan of the last pass and the per-report flags, from the core passes."""
    plan = poisoning.initial_plan(oracle)
    for _ in range(poisoning.NUM_PASSES - 1):
        plan = poisoning.advance(plan, poisoning.tally(plan, reports))
    return plan, poisoning.flag_reports(plan, reports)


def binomial_band(n: int, prob: float, alpha: float = 1e-6) -> tuple[int, int]:
    return int(stats.binom.ppf(alpha / 2, n, prob)), int(stats.binom.isf(alpha / 2, n, prob))


# -- exact laws ----------------------------------------------------------------------------
def enumerate_unary(oracle, value):
    """Every bit vector of a tiny unary-encoding domain with its probability for ``value``."""
    d, p, q = oracle.domain_size, oracle.p, oracle.q
    for bits in itertools.product((0, 1), repeat=d):
        prob = 1.0
        for j, bit in enumerate(bits):
            rate = p if j == value else q
            prob *= rate if bit else 1 - rate
        yield np.array(bits), prob


@pytest.mark.parametrize("name", ["oue", "sue"])
def test_support_size_law_equals_enumeration(name):
    oracle = ldpflow.oracle(name, epsilon=0.8, domain_size=7)
    for value in (0, 4):
        law = np.zeros(8)
        for bits, prob in enumerate_unary(oracle, value):
            law[bits.sum()] += prob
        np.testing.assert_allclose(poisoning.support_size_law(oracle), law, rtol=1e-12,
                                   atol=1e-15)


@pytest.mark.parametrize("name", ["oue", "sue"])
def test_truncated_constants_equal_enumeration(name):
    oracle = ldpflow.oracle(name, epsilon=0.8, domain_size=7)
    accepted = np.array([0, 1, 1, 0, 1, 1, 0, 1], dtype=bool)
    kept = own = other = 0.0
    for bits, prob in enumerate_unary(oracle, 0):
        if accepted[bits.sum()]:
            kept += prob
            own += prob * bits[0]
            other += prob * bits[3]
    total, p_kept, q_kept = poisoning.truncated_constants(oracle, accepted)
    assert math.isclose(total, kept, rel_tol=1e-12)
    assert math.isclose(p_kept, own / kept, rel_tol=1e-12)
    assert math.isclose(q_kept, other / kept, rel_tol=1e-12)


def test_size_bounds_false_positive_is_exact_and_at_most_level():
    oracle = ldpflow.oracle("oue", epsilon=1.0, domain_size=1024)
    law = poisoning.support_size_law(oracle)
    for level in (1e-3, 1e-2, 0.1):
        lo, hi, fp = poisoning.support_size_bounds(oracle, level)
        assert math.isclose(fp, law[:lo].sum() + law[hi + 1 :].sum(), rel_tol=1e-9)
        assert fp <= level
        # One more accepted size on either side would be the tighter test: not allowed.
        assert law[:lo + 1].sum() > level / 2 and law[hi:].sum() > level / 2
    ss = ldpflow.oracle("ss", epsilon=1.0, domain_size=1024)
    assert poisoning.support_size_bounds(ss, 1e-3) == (ss.subset_size, ss.subset_size, 0.0)


# -- false positives on honest reports -----------------------------------------------------
@pytest.mark.statistical
@pytest.mark.parametrize("name", ["oue", "sue"])
def test_honest_false_positive_rate_within_binomial_band(name):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=D)
    reports = oracle.perturb(population(7), np.random.default_rng(8))
    plan, flags = passes(oracle, reports)
    assert plan.spike_sizes == () and plan.suspected == ()
    _, _, fp = poisoning.support_size_bounds(oracle, plan.level)
    low, high = binomial_band(N, fp)
    assert low <= int(flags.sum()) <= high


@pytest.mark.parametrize("name", ["grr", "olh", "ss"])
def test_honest_population_raises_no_alarm(name):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=D)
    reports = oracle.perturb(population(9), np.random.default_rng(10))
    report = poisoning.defend(oracle, reports)
    assert report.suspected == () and report.flagged == 0
    raw = oracle.estimate(oracle.aggregate(reports)).frequencies
    np.testing.assert_array_equal(report.recovered, raw)


def test_grr_value_held_by_everyone_is_not_impossible():
    # The value test compares with Binomial(N, p): what a value gets if every user holds it.
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=D)
    reports = oracle.perturb(np.full(N, 3), np.random.default_rng(11))
    assert poisoning.defend(oracle, reports).suspected == ()


# -- attacks -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, variant", [("grr", "naive"), ("oue", "naive"),
                                           ("oue", "fixed-size"), ("oue", "matched"),
                                           ("sue", "fixed-size"), ("ss", "fixed-size"),
                                           ("olh", "naive")])
def test_attack_reports_are_valid_and_support_the_targets(name, variant):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=D)
    targets = [5, 17, 200]
    fakes = poisoning.maximal_gain_attack(oracle, targets, 300, np.random.default_rng(1),
                                          variant=variant, tries=64)
    oracle.validate(fakes)
    assert len(fakes) == 300
    if name == "grr":
        assert np.isin(fakes.value, targets).all()
    elif name != "olh":
        dense = bitvectors.unpack(fakes.bits, D)
        assert dense[:, targets].all()
        sizes = dense.sum(axis=1)
        if variant == "naive":
            assert (sizes == 3).all()
        elif variant == "fixed-size":
            expected = (oracle.subset_size if name == "ss"
                        else round(oracle.p + (D - 1) * oracle.q))
            assert (sizes == expected).all()


def test_olh_attack_picks_the_best_of_its_seeds():
    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=D)
    targets = np.arange(10) * 7 + 3
    fakes = poisoning.maximal_gain_attack(oracle, targets, 50, np.random.default_rng(2),
                                          tries=256)
    supported = poisoning._support_matrix(oracle, fakes, targets).sum(axis=1)
    # The best of 256 seeds beats a random seed: its bucket holds at least the mean load.
    assert supported.min() >= 10 / oracle.hash_range
    one = poisoning.maximal_gain_attack(oracle, [42], 50, np.random.default_rng(3))
    assert poisoning._support_matrix(oracle, one, [42]).all()


def test_fake_user_count_makes_the_share_beta():
    assert poisoning.fake_user_count(95_000, 0.05) == 5000
    assert poisoning.fake_user_count(10, 0.0) == 0
    with pytest.raises(ValueError, match="beta must be in"):
        poisoning.fake_user_count(10, 1.0)


# -- detection and recovery ----------------------------------------------------------------
def kept_sigma(report, oracle):
    """The standard deviation of a recovered bitmap estimate at frequency 0 (exact constants
    of the kept reports)."""
    p, q, n = report.details["kept_p"], report.details["kept_q"], report.details["kept"]
    return math.sqrt(q * (1 - q) / (n * (p - q) ** 2))


@pytest.mark.statistical
@pytest.mark.parametrize("name, variant", [("oue", "naive"), ("oue", "fixed-size"),
                                           ("sue", "fixed-size")])
def test_unary_attack_is_flagged_and_its_gain_removed(name, variant):
    oracle, values, genuine, fakes, reports = attacked(name, 20, variant=variant)
    plan, flags = passes(oracle, reports)
    genuine_flags, fake_flags = flags[: len(genuine)], flags[len(genuine):]
    assert fake_flags.all()  # recall 1
    if variant == "fixed-size":
        assert plan.suspected == (TARGET,)
        assert plan.spike_sizes == (round(oracle.p + (D - 1) * oracle.q),)
    # Genuine reports flagged: the size test's level plus, with a spike, the genuine reports
    # of the spike size supporting the target (at most their share of the size law).
    _, _, fp = poisoning.support_size_bounds(oracle, plan.level)
    law = poisoning.support_size_law(oracle)
    bound = fp + sum(law[s] for s in plan.spike_sizes)
    assert genuine_flags.sum() <= binomial_band(len(genuine), bound)[1]
    report = poisoning.defend(oracle, reports)
    assert report.flagged == flags.sum()
    truth = np.mean(values == TARGET)
    sigma = kept_sigma(report, oracle)
    raw = oracle.estimate(oracle.aggregate(reports)).frequencies[TARGET]
    assert raw - truth > 6 * sigma  # the attack works without the defence
    assert abs(report.recovered[TARGET] - truth) < 4 * sigma


@pytest.mark.statistical
def test_matched_unary_attack_is_not_detectable_per_report():
    # Fake reports distributed as a genuine report of the target with its bit set: every
    # per-report test with level a flags them with probability <= e^eps a / p (docs).
    oracle, _, genuine, fakes, reports = attacked("oue", 21, variant="matched")
    plan, flags = passes(oracle, reports)
    assert plan.suspected == ()
    bound = math.exp(oracle.epsilon) * plan.level / oracle.p
    assert flags[len(genuine):].sum() <= binomial_band(len(fakes), bound)[1]


@pytest.mark.statistical
def test_grr_target_is_suspected_and_recovered():
    oracle, values, genuine, fakes, reports = attacked("grr", 22)
    report = poisoning.defend(oracle, reports)
    assert report.suspected == (TARGET,) and not report.identifiable
    assert report.flagged == int((reports.value == TARGET).sum())
    assert report.recovered[TARGET] == 0.0
    # The others were depressed by the fakes' share; recovery restores them: the mean error
    # over the non-targets is within 4 sigma / sqrt(d - 1) of 0 (errors nearly independent).
    others = np.arange(D) != TARGET
    truth = np.bincount(values, minlength=D) / N
    sigma = math.sqrt(oracle.variance(N))
    raw = oracle.estimate(oracle.aggregate(reports)).frequencies
    shift = 4 * sigma / math.sqrt(D - 1)
    assert abs(np.mean(report.recovered[others] - truth[others])) < shift
    assert np.mean(raw[others] - truth[others]) < -shift
    fake_share = len(fakes) / len(reports)
    assert math.isclose(report.details["fake_users_estimate"] / len(reports), fake_share,
                        abs_tol=4 * math.sqrt(N * oracle.q) / len(reports))


@pytest.mark.statistical
def test_olh_multi_target_attack_is_detected_by_co_support():
    targets = tuple(int(v) for v in np.random.default_rng(5).choice(np.arange(64, D), 8,
                                                                      replace=False))
    oracle, values, genuine, fakes, reports = attacked("olh", 23, targets=targets, tries=512)
    plan, flags = passes(oracle, reports)
    assert set(targets) <= set(plan.suspected)
    tail = poisoning._tail(poisoning._null_support(oracle, plan.suspected))
    assert tail[plan.min_supported] <= plan.level
    # Genuine reports flagged: within the band of the null tail plus the targets' holders.
    held = np.isin(values, plan.suspected).mean()
    bound = tail[plan.min_supported] + held
    assert flags[: len(genuine)].sum() <= binomial_band(len(genuine), bound)[1]
    supported = poisoning._support_matrix(oracle, fakes, plan.suspected).sum(axis=1)
    np.testing.assert_array_equal(flags[len(genuine):], supported >= plan.min_supported)
    report = poisoning.defend(oracle, reports)
    truth = np.bincount(values, minlength=D) / N
    idx = list(targets)
    # Recovery: within 4 sigma of the truth (the estimates of distinct values are
    # uncorrelated for non-holders: the hash family is pairwise uniform), plus what the
    # unflagged fakes can add, at most one report per supported target each.
    p, q = oracle.p, oracle.q
    sigma = math.sqrt(len(idx) * oracle.variance(N))
    escaped = poisoning._support_matrix(oracle, fakes[~flags[len(genuine):]], idx).sum()
    error = np.sum(report.recovered[idx] - truth[idx])
    assert abs(error) < 4 * sigma + escaped / (N * (p - q))
    raw = oracle.estimate(oracle.aggregate(reports)).frequencies
    assert np.sum(raw[idx] - truth[idx]) > 10 * abs(error)


# -- passes, tallies, merging --------------------------------------------------------------
@pytest.mark.parametrize("name", ["grr", "oue", "ss", "olh"])
def test_tallies_of_shards_merge_to_the_tally_of_all(name):
    oracle, _, _, _, reports = attacked(name, 30, variant="fixed-size" if name != "grr"
                                        else "naive", tries=64)
    plan = poisoning.initial_plan(oracle)
    cut = len(reports) // 3
    for pass_index in range(poisoning.NUM_PASSES):
        whole = poisoning.tally(plan, reports)
        merged = poisoning.tally(plan, reports[:cut]).merge(poisoning.tally(plan, reports[cut:]))
        assert set(whole.counts) == set(merged.counts)
        for field, value in whole.counts.items():
            np.testing.assert_array_equal(merged.counts[field], value, err_msg=field)
        if pass_index < poisoning.NUM_PASSES - 1:
            plan = poisoning.advance(plan, whole)
    assert poisoning.finish(plan, whole).to_dict() == poisoning.defend(oracle, reports).to_dict()


@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_no_reports_give_an_empty_report(name):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=D)
    report = poisoning.defend(oracle, oracle.empty_reports())
    assert report.n == 0 and report.flagged == 0 and report.suspected == ()
    assert np.isnan(report.recovered).all()
    section = report.to_dict()
    assert section["recovered_estimates"] == [None] * D and section["flagged_fraction"] == 0.0


def test_section_is_plain_json():
    oracle, _, _, _, reports = attacked("oue", 31, variant="fixed-size")
    section = poisoning.defend(oracle, reports).to_dict()
    assert json.loads(json.dumps(section, allow_nan=False)) == section
    assert section["suspected"] == [TARGET] and section["test"] == "support-size"


def test_errors_name_the_problem():
    hr = ldpflow.oracle("hr", epsilon=1.0, domain_size=D)
    assert set(poisoning.SUPPORTED) == {"grr", "oue", "sue", "ss", "olh", "blh"}
    with pytest.raises(ValueError, match=f"oracle must be one of {' '.join(poisoning.SUPPORTED)}"):
        poisoning.initial_plan(hr)
    oue = ldpflow.oracle("oue", epsilon=1.0, domain_size=D)
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        poisoning.initial_plan(oue, level=0.0)
    with pytest.raises(ValueError, match="variant must be one of"):
        poisoning.maximal_gain_attack(oue, [1], 5, np.random.default_rng(0), variant="x")
    with pytest.raises(ValueError, match="targets must be distinct"):
        poisoning.maximal_gain_attack(oue, [1, 1], 5, np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        poisoning.maximal_gain_attack(oue, [1], 5, 0)
    plan = poisoning.initial_plan(oue)
    first = poisoning.tally(plan, oue.perturb(np.zeros(10, dtype=int), np.random.default_rng(0)))
    with pytest.raises(ValueError, match="a tally of pass 0 given to the plan of pass 1"):
        poisoning.advance(poisoning.advance(plan, first), first)
    with pytest.raises(ValueError, match="cannot merge a tally of pass"):
        first.merge(poisoning.PoisoningTally(1, {"n": np.zeros(1, dtype=np.int64)}))


# -- the dispersion test: many values with excess -------------------------------------------
def hugging(seed: int, n: int = 50_000, d: int = 1024, count: int = 21, per: int = 122):
    """Issue 22's threshold-hugging attack: ``count`` rare targets with ``per`` fake GRR
    reports each, every target under the per-value threshold (beta 4.9 % at the defaults)."""
    rng = np.random.default_rng(seed)
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=d)
    values = population(seed + 1, n, d)
    targets = np.arange(d - count, d)  # the rarest ranks of the Zipf population
    genuine = oracle.perturb(values, rng)
    fakes = poisoning.spread_attack(oracle, targets, per, rng)
    return oracle, values, targets, genuine, Reports.concat([genuine, fakes])


@pytest.mark.statistical
def test_grr_threshold_hugging_attack_is_flagged_and_its_gain_cut():
    oracle, values, targets, genuine, reports = hugging(40)
    n, big_n, d = len(genuine), len(reports), oracle.domain_size
    counts = np.bincount(reports.value, minlength=d)
    # Every target stays under the per-value threshold (Binomial(N, p) at the level / d that
    # the test had before the dispersion test took half of it): no value test can see them.
    assert counts.max() <= stats.binom.isf(poisoning.DEFAULT_POPULATION_LEVEL / d, big_n,
                                           oracle.p)
    report = poisoning.defend(oracle, reports)
    assert report.details["value_count_suspected"] == []
    dispersion = report.details["dispersion"]
    assert dispersion["alarm"] and dispersion["value"] > dispersion["threshold"]
    assert dispersion["p_value"] < dispersion["level"] == poisoning.DEFAULT_POPULATION_LEVEL / 4
    # The fewest values of largest count explaining the alarm: targets only, all but at most
    # one (a lone value of 122 fakes is what an honest population held by one user gives).
    assert set(report.suspected) <= set(targets.tolist()) and len(report.suspected) >= 20
    truth = np.bincount(values, minlength=d) / n
    raw = oracle.estimate(oracle.aggregate(reports)).frequencies
    raw_gain = float(np.sum(raw[targets] - truth[targets]))
    defended_gain = float(np.sum(report.recovered[targets] - truth[targets]))
    # Escaped targets keep their fakes: at most 122 reports each over n^ (p - q), plus noise.
    escaped = len(targets) - len(report.suspected)
    sigma = math.sqrt(len(targets) * oracle.variance(n))
    assert raw_gain > 20 * sigma
    assert defended_gain < escaped * 122 / (n * (oracle.p - oracle.q)) + 4 * sigma
    assert raw_gain > 10 * defended_gain


def test_dispersion_moments_equal_a_direct_sum_for_two_values():
    # d = 2 grr with every user holding value 0: c_0 ~ Binomial(n, p), c_1 = n - c_0; the
    # statistic is (c_0 - nq)^2 / a + (n - c_0 - nq)^2 / a, summed exactly over the law.
    oracle = ldpflow.oracle("oue", epsilon=0.7, domain_size=2)
    n = 60
    p, q = oracle.p, oracle.q
    a = n * q * (1 - q)
    # oue: the two bits independent; c_0 ~ Bin(n, p), c_1 ~ Bin(n, q).
    k = np.arange(n + 1)
    x0 = (k - n * q) ** 2 / a
    w0, w1 = stats.binom.pmf(k, n, p), stats.binom.pmf(k, n, q)
    mean = w0 @ x0 + w1 @ x0
    var = w0 @ x0**2 - (w0 @ x0) ** 2 + w1 @ x0**2 - (w1 @ x0) ** 2
    got_mean, got_var = poisoning.dispersion_moments(oracle, n, mass_bound=1.0)
    assert math.isclose(float(got_mean), mean, rel_tol=1e-12)
    assert math.isclose(float(got_var), var, rel_tol=1e-12)


def dispersion_alarms(name: str, values: np.ndarray, runs: int, level: float, seed: int):
    """How many of ``runs`` honest populations (fixed values, fresh randomness) raise the
    dispersion alarm at family-wise ``level``, and the defence's overall alarms (anything
    suspected) at ``population_level = level``."""
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=32)
    rng = np.random.default_rng(seed)
    alarms = overall = 0
    for _ in range(runs):
        reports = oracle.perturb(values, rng)
        support = oracle.support_counts(oracle.aggregate(reports))
        alarms += poisoning.dispersion_test(oracle, support, len(reports), level)["alarm"]
        if name == "grr":
            overall += bool(poisoning.defend(oracle, reports, population_level=level).suspected)
    return alarms, overall


@pytest.mark.statistical
@pytest.mark.slow
@pytest.mark.parametrize("name", ["grr", "oue", "olh"])
def test_dispersion_false_alarm_rate_is_its_level_on_the_least_favourable_population(name):
    # Everyone holds one value: the honest population of largest dispersion, where the null
    # law is attained, so the alarm rate is the nominal level / 2 (the other half bounds the
    # largest frequency, which holds here with probability ~1), within 4 binomial sigma.
    runs, level = 1500, 0.2
    alarms, overall = dispersion_alarms(name, np.zeros(2000, dtype=np.int64), runs, level, 41)
    nominal = level / 2
    sigma = math.sqrt(nominal * (1 - nominal) / runs)
    assert abs(alarms / runs - nominal) <= 4 * sigma
    if name == "grr":  # per-value and dispersion tests together: at most population_level
        assert overall / runs <= level + 4 * math.sqrt(level * (1 - level) / runs)


@pytest.mark.statistical
@pytest.mark.slow
def test_dispersion_false_alarm_rate_is_at_most_its_level_on_other_populations():
    # A Zipf population spreads its mass: the least favourable null overstates it, so the
    # alarm rate is at most the nominal level (within 4 sigma).
    runs, level = 1500, 0.2
    values = population(42, 2000, 32)
    alarms, overall = dispersion_alarms("grr", values, runs, level, 43)
    bound = level / 2 + 4 * math.sqrt(level / 2 * (1 - level / 2) / runs)
    assert alarms / runs <= bound and overall / runs <= level + 4 * math.sqrt(
        level * (1 - level) / runs)


def test_every_family_reports_the_dispersion_statistic():
    for name in ("grr", "oue", "olh", "ss"):
        oracle, _, _, _, reports = attacked(name, 44, variant="fixed-size", tries=64)
        section = poisoning.defend(oracle, reports).to_dict()
        test = section["details"]["dispersion"]
        assert test["name"] == "dispersion"
        assert set(test) >= {"value", "threshold", "p_value", "level", "alarm", "mass_bound"}
        assert test["alarm"] == (test["value"] > test["threshold"])
        assert json.loads(json.dumps(section, allow_nan=False)) == section
