"""Poisoning benchmark: the maximal gain attack's gain on its targets without and with the
defence of ``ldpflow.core.poisoning``, and the defence's detection recall and false positives.

    python benchmarks/poisoning.py [--users 100000] [--domain_size 1024] [--epsilon 1.0]
                                   [--betas 0.01,0.05,0.1] [--seed 20211] [--cases ...]
                                   [--honest_runs 0 --honest_level 0.2 --honest_users 20000]

``--users`` genuine users draw Zipf(1.1) values; ``m = beta n / (1 - beta)`` fake users are
added (a share ``beta`` of all reports). One JSON object per case and beta on stdout:

* ``case``, ``oracle``, ``attack``, ``beta``, ``fake_users``, ``targets``, ``level``;
* ``true_frequency``: the targets' summed genuine frequency;
* ``estimate``: the targets' summed estimate on genuine reports alone (``clean``) and with the
  fakes (``attacked``), each ``raw`` and ``defended`` (recovered);
* ``gain``: ``attacked - clean`` on the same genuine reports (paired), ``raw`` and
  ``defended``, and ``reduction = |raw| / |defended|``; ``sigma``: the standard deviation of
  the raw summed estimate, for scale (a defended gain within a few ``sigma`` is noise);
* ``recall``: fakes flagged / fakes; ``false_positive``: genuine reports flagged / genuine;
  ``suspected``: the values the population tests suspect (``clean_suspected`` on genuine
  reports alone: false alarms);
* ``dispersion`` (``clean_dispersion`` on genuine reports alone): the dispersion test's
  ``value``, ``threshold``, ``p_value``, ``level`` and ``alarm``.

The threshold-hugging cases (``*-hugging``) spread the fakes evenly over the fewest rare
targets (drawn from ranks >= 100) that keep each GRR target under the per-value threshold
with a margin of 3 standard deviations of its genuine count (``hugging_plan``); each fake
runs the single-target MGA (``poisoning.spread_attack``: OUE matched, OLH best of
``--tries`` seeds). They add ``fakes_per_target``, ``per_value_accepted_count`` (the largest
count the GRR value test accepts) and, for GRR, ``max_target_count``.

``--honest_runs R`` first prints, per oracle (grr, oue, olh) and honest population
(``point``: everyone holds one value, the least favourable; ``zipf``), the share of ``R``
perturbations of ``--honest_users`` users raising the dispersion alarm at
``population_level = --honest_level`` (nominal rate ``level / 4``, with its binomial sigma)
and the share with anything suspected (at most ``level``).

The single-target cases promote the value whose genuine frequency is nearest 0.02%; the
multi-target cases ten values drawn at random from ranks >= 100 (Cao et al.'s setting).

PEM cases (``pem-mga-*``): top-16 heavy hitters of the same 10-bit values with three passes
(prefixes of 6, 8 and 10 bits, one group each); each fake user runs the MGA of its group's
pass oracle on the targets' prefixes, and the defence runs on each pass's OLH reports,
whose flagged reports are dropped before PEM identifies the top 16 again. Reported:
``in_top_k`` (targets among the 16, raw and defended), ``estimate`` (the targets' summed
estimated frequency, 0 for a target not identified), recall and false positives over all
passes.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from ldpflow.core import poisoning, simulation
from ldpflow.core.heavy_hitters import NAME as PEM
from ldpflow.core.heavy_hitters import PrefixExtendingMethod
from ldpflow.core.oracles import Reports, registry

#: (case, oracle, attack, variant, number of targets, per-report level)
CASES = [
    ("grr-mga", "grr", "mga", None, 1, None),
    ("grr-input", "grr", "input", None, 1, None),
    ("oue-mga-naive", "oue", "mga", "naive", 1, None),
    ("oue-mga-fixed-size", "oue", "mga", "fixed-size", 1, None),
    ("oue-mga-matched", "oue", "mga", "matched", 1, None),
    ("oue-input", "oue", "input", None, 1, None),
    ("sue-mga-fixed-size", "sue", "mga", "fixed-size", 1, None),
    ("ss-mga-fixed-size", "ss", "mga", "fixed-size", 1, None),
    ("olh-mga-1-target", "olh", "mga", None, 1, None),
    ("olh-mga-10-targets", "olh", "mga", None, 10, None),
    ("olh-mga-10-targets-level-0.001", "olh", "mga", None, 10, 1e-3),
    ("olh-input", "olh", "input", None, 1, None),
    ("pem-mga-1-target", "pem", "mga", None, 1, None),
    ("pem-mga-10-targets", "pem", "mga", None, 10, None),
    # last, so the cases before them draw what they drew before these were added
    ("grr-hugging", "grr", "hugging", None, None, None),
    ("oue-hugging", "oue", "hugging", "matched", None, None),
    ("olh-hugging", "olh", "hugging", None, None, None),
]
PEM_TOP_K = 16


def hugging_plan(n, beta, d, eps, population_level=poisoning.DEFAULT_POPULATION_LEVEL):
    """(targets, fakes per target) of the threshold-hugging attack: the fewest targets whose
    share of ``m`` fakes keeps each GRR target under the per-value threshold (the largest
    count ``Binomial(N, p)`` accepts at its level), with a margin of 3 standard deviations
    of the genuine count ``N q`` of a rare value."""
    from scipy import stats

    grr = registry.make("grr", epsilon=eps, domain_size=d)
    m = poisoning.fake_user_count(n, beta)
    big_n = n + m
    level = population_level * (1 - poisoning.DISPERSION_SHARE) / d
    accepted = int(stats.binom.isf(level, big_n, grr.p))
    per_max = accepted - math.ceil(big_n * grr.q + 3 * math.sqrt(big_n * grr.q))
    count = math.ceil(m / per_max)
    return count, m // count, accepted


def dispersion_summary(report):
    test = report.details.get("dispersion", {})
    return {key: test.get(key) for key in ("value", "threshold", "p_value", "level", "alarm")}


def pem_identify(pem, reports):
    """The targets' summed estimate (0 where not identified) and the identified values."""
    found = pem.identify(reports)
    return dict(zip(found.values.tolist(), found.frequencies.tolist(), strict=True))


def pem_case(case, pem, values, genuine, targets, beta, truth, rng, tries):
    """One PEM case: fakes per group, the defence per pass, identification before/after."""
    n = values.size
    m = poisoning.fake_user_count(n, beta)
    groups = pem.group_of(np.arange(n, n + m))
    columns = {"seed": np.zeros(m, np.uint64), "bucket": np.zeros(m, np.int64),
               "group": groups.astype(np.int64),
               "prefix_bits": np.asarray(pem.prefix_bits, np.int64)[groups]}
    for pass_index, bits in enumerate(pem.prefix_bits):
        rows = np.flatnonzero(groups == pass_index)
        prefixes = np.unique(targets >> (pem.value_bits - bits))
        fake = poisoning.maximal_gain_attack(pem.oracle(pass_index), prefixes, rows.size, rng,
                                             tries=tries)
        columns["seed"][rows], columns["bucket"][rows] = fake.seed, fake.bucket
    reports = Reports.concat([genuine, Reports(PEM, columns)])
    flags = np.zeros(len(reports), dtype=bool)
    level = None
    for pass_index in range(pem.num_groups):
        rows = np.flatnonzero(reports.group == pass_index)
        pass_reports = Reports("olh", {"seed": reports.seed[rows],
                                        "bucket": reports.bucket[rows]})
        plan, pass_flags, _ = run_defence(pem.oracle(pass_index), pass_reports, None)
        flags[rows] = pass_flags
        level = plan.level
    found = {"clean": pem_identify(pem, genuine), "raw": pem_identify(pem, reports),
             "defended": pem_identify(pem, reports[~flags])}
    clean_flags = np.zeros(n, dtype=bool)
    for pass_index in range(pem.num_groups):
        rows = np.flatnonzero(genuine.group == pass_index)
        pass_reports = Reports("olh", {"seed": genuine.seed[rows],
                                        "bucket": genuine.bucket[rows]})
        clean_flags[rows] = run_defence(pem.oracle(pass_index), pass_reports, None)[1]
    summed = {name: float(sum(top.get(int(t), 0.0) for t in targets))
              for name, top in found.items()}
    hits = {name: int(sum(int(t) in top for t in targets)) for name, top in found.items()}
    return {
        "case": case, "oracle": "pem", "attack": "mga", "beta": beta, "users": n,
        "fake_users": m, "targets": targets.tolist(), "level": level,
        "prefix_bits": list(pem.prefix_bits), "top_k": PEM_TOP_K,
        "true_frequency": float(truth[targets].sum()),
        "in_top_k": hits, "estimate": summed,
        "gain": {"raw": summed["raw"] - summed["clean"],
                 "defended": summed["defended"] - summed["clean"]},
        "recall": float(flags[n:].mean()) if m else None,
        "false_positive": float(flags[:n].mean()),
        "clean_false_positive": float(clean_flags.mean()),
    }


def honest_alarms(names, values, d, eps, runs, level, rng):
    """Rows of the honest alarm rates: per oracle and population (``point``: everyone holds
    value 0, the least favourable; ``zipf``: the benchmark's), over ``runs`` fresh
    perturbations, the share raising the dispersion alarm at family-wise ``level`` (nominal
    ``level / 2``: the statistic's share) and the share with anything suspected by the
    defence at ``population_level = level``."""
    n = values.size
    for name in names:
        oracle = registry.make(name, epsilon=eps, domain_size=d)
        for label, held in (("point", np.zeros(n, dtype=np.int64)), ("zipf", values)):
            started = time.perf_counter()
            alarms = suspected = 0
            for _ in range(runs):
                reports = oracle.perturb(held, rng)
                plan = poisoning.initial_plan(oracle, None, level)
                plan = poisoning.advance(plan, poisoning.tally(plan, reports))
                alarms += plan.details["dispersion"]["alarm"]
                suspected += bool(run_defence(oracle, reports, None, level)[0].suspected)
            nominal = level / 4
            print(json.dumps({
                "case": "honest-alarms", "oracle": name, "population": label, "users": n,
                "domain_size": d, "epsilon": eps, "runs": runs, "population_level": level,
                "dispersion_alarm_rate": alarms / runs, "dispersion_nominal": nominal,
                "dispersion_sigma": math.sqrt(nominal * (1 - nominal) / runs),
                "any_suspected_rate": suspected / runs,
                "seconds": round(time.perf_counter() - started, 2)}), flush=True)


def run_defence(oracle, reports, level, population_level=poisoning.DEFAULT_POPULATION_LEVEL):
    """(final plan, per-report flags, report) of the core passes."""
    plan = poisoning.initial_plan(oracle, level, population_level)
    for _ in range(poisoning.NUM_PASSES - 1):
        plan = poisoning.advance(plan, poisoning.tally(plan, reports))
    flags = poisoning.flag_reports(plan, reports)
    return plan, flags, poisoning.finish(plan, poisoning.tally(plan, reports))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--domain_size", type=int, default=1024)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--betas", default="0.01,0.05,0.1")
    parser.add_argument("--seed", type=int, default=20211)
    parser.add_argument("--tries", type=int, default=1000,
                        help="seeds an OLH fake user examines")
    parser.add_argument("--cases", default=",".join(c[0] for c in CASES))
    parser.add_argument("--honest_runs", type=int, default=0,
                        help="also measure the honest alarm rates over this many runs")
    parser.add_argument("--honest_level", type=float, default=0.2,
                        help="population_level of the honest alarm runs")
    parser.add_argument("--honest_users", type=int, default=20_000)
    args = parser.parse_args(argv)
    n, d, eps = args.users, args.domain_size, args.epsilon
    betas = [float(b) for b in args.betas.split(",")]
    wanted = set(args.cases.split(","))
    rng = np.random.default_rng(args.seed)
    values = simulation.RankDistribution("zipf", 1.1).sample(d, n, rng)
    truth = np.bincount(values, minlength=d) / n
    single = np.array([int(np.argmin(np.abs(truth - 2e-4)))])
    several = np.sort(rng.choice(np.arange(100, d), 10, replace=False))
    if args.honest_runs:
        honest_alarms(("grr", "oue", "olh"), values[: args.honest_users], d, eps,
                      args.honest_runs, args.honest_level,
                      np.random.default_rng(args.seed + 1))  # the cases' draws stay the same
    genuine_by_oracle: dict[str, tuple] = {}
    for case, name, attack, variant, count, level in CASES:
        if case not in wanted:
            continue
        targets = single if count == 1 else several
        if name == "pem":
            if d & (d - 1):
                raise SystemExit("the PEM cases need a power-of-two --domain_size")
            bits = d.bit_length() - 1
            pem = PrefixExtendingMethod(top_k=PEM_TOP_K, value_bits=bits, epsilon=eps,
                                        step_bits=max(1, (bits - 4) // 3))
            if name not in genuine_by_oracle:
                genuine_by_oracle[name] = (pem.perturb(values, np.arange(n), rng),)
            for beta in betas:
                started = time.perf_counter()
                row = pem_case(case, pem, values, genuine_by_oracle[name][0],
                               targets, beta, truth, rng, args.tries)
                row["seconds"] = round(time.perf_counter() - started, 2)
                print(json.dumps(row), flush=True)
            continue
        oracle = registry.make(name, epsilon=eps, domain_size=d)
        if name not in genuine_by_oracle:  # one genuine population per oracle: paired gains
            genuine_by_oracle[name] = (oracle.perturb(values, rng),)
        (genuine,) = genuine_by_oracle[name]
        raw_clean = oracle.estimate(oracle.aggregate(genuine)).frequencies[targets].sum()
        clean_plan, clean_flags, clean_report = run_defence(oracle, genuine, level)
        sigma = math.sqrt(targets.size * oracle.variance(n))
        for beta in betas:
            started = time.perf_counter()
            m = poisoning.fake_user_count(n, beta)
            if attack == "hugging":
                spread, per, accepted = hugging_plan(n, beta, d, eps)
                targets = np.sort(np.random.default_rng(args.seed + spread).choice(
                    np.arange(100, d), spread, replace=False))
                raw_clean = oracle.estimate(oracle.aggregate(genuine)).frequencies[targets].sum()
                sigma = math.sqrt(targets.size * oracle.variance(n))
                m = spread * per
                extra = {"variant": variant} if variant else {"tries": args.tries}
                fakes = poisoning.spread_attack(oracle, targets, per, rng, **extra)
            elif attack == "mga":
                extra = {"variant": variant} if variant else {}
                if name == "olh":
                    extra["tries"] = args.tries
                fakes = poisoning.maximal_gain_attack(oracle, targets, m, rng, **extra)
            else:
                fakes = poisoning.input_manipulation(oracle, targets, m, rng)
            reports = Reports.concat([genuine, fakes])
            raw = oracle.estimate(oracle.aggregate(reports)).frequencies[targets].sum()
            plan, flags, report = run_defence(oracle, reports, level)
            defended = report.recovered[targets].sum()
            clean_defended = clean_report.recovered[targets].sum()
            gain_raw, gain_defended = raw - raw_clean, defended - clean_defended
            level_used = plan.level
            print(json.dumps({
                "case": case, "oracle": name, "attack": attack, "variant": variant,
                "beta": beta, "users": n, "fake_users": m, "domain_size": d, "epsilon": eps,
                "level": level_used, "targets": targets.tolist(),
                "true_frequency": float(truth[targets].sum()),
                "estimate": {"clean": {"raw": float(raw_clean),
                                       "defended": float(clean_defended)},
                             "attacked": {"raw": float(raw), "defended": float(defended)}},
                "gain": {"raw": float(gain_raw), "defended": float(gain_defended),
                         "reduction": float(abs(gain_raw) / max(abs(gain_defended), 1e-12))},
                "sigma": sigma,
                "recall": float(flags[n:].mean()) if m else None,
                "false_positive": float(flags[:n].mean()),
                "clean_false_positive": float(clean_flags.mean()),
                "suspected": list(plan.suspected)[:20],
                "suspected_count": len(plan.suspected),
                "targets_suspected": int(np.isin(targets, plan.suspected).sum()),
                "clean_suspected": list(clean_plan.suspected),
                "dispersion": dispersion_summary(report),
                "clean_dispersion": dispersion_summary(clean_report),
                **({"fakes_per_target": per, "per_value_accepted_count": accepted,
                    "max_target_count": int(np.bincount(
                        reports.value, minlength=d)[targets].max()) if name == "grr" else None}
                   if attack == "hugging" else {}),
                "seconds": round(time.perf_counter() - started, 2),
            }), flush=True)


if __name__ == "__main__":
    main()
