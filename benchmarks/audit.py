"""Audit benchmark: epsilon_lb, its gap to epsilon and seconds per oracle and epsilon.

    python benchmarks/audit.py [--reports 1000000] [--domain_size 1024] [--secure]

For every oracle and every epsilon of ``--epsilons`` (0.5, 1, 2, 4), the audit of
ldpflow's own perturbation (:func:`ldpflow.core.audit.audit_oracle`, inputs 0 and 1,
``--reports`` reports of each) is timed end to end (perturbation included). Prints one JSON
document: per run ``oracle``, ``domain_size``, ``epsilon``, ``epsilon_lb``, ``gap``
(``epsilon - epsilon_lb``), ``expected_gap`` and ``sd`` (:func:`ldpflow.core.audit.resolution`:
the gap at the expected counts and the standard deviation of ``epsilon_lb``), the selected
event and ``seconds``. grr is also run at ``--small_domain`` (16), where its event has
enough mass to resolve epsilon. Seeded (``--seed``) unless ``--secure``: the OS CSPRNG, as
``ldpflow audit`` without ``--seed`` draws.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from ldpflow.core import audit
from ldpflow.core.oracles import registry


def one(name: str, epsilon: float, domain_size: int, reports: int, seed: int | None) -> dict:
    oracle = registry.make(name, epsilon=epsilon, domain_size=domain_size)
    rng = None if seed is None else np.random.default_rng([seed, int(epsilon * 100)])
    started = time.perf_counter()
    result = audit.audit_oracle(oracle, reports, 0, 1, rng)
    seconds = time.perf_counter() - started
    expected = audit.resolution(oracle, reports)
    return {"oracle": name, "domain_size": domain_size, "epsilon": epsilon,
            "epsilon_lb": round(result.epsilon_lower_bound, 4), "gap": round(result.gap, 4),
            "expected_gap": round(expected["gap"], 4), "sd": round(expected["sd"], 4),
            "event": f"{result.selected.comparison}: {', '.join(result.selected.labels)}",
            "conforms": result.conforms, "seconds": round(seconds, 2)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--reports", type=int, default=1_000_000)
    parser.add_argument("--domain_size", type=int, default=1024)
    parser.add_argument("--small_domain", type=int, default=16)
    parser.add_argument("--epsilons", default="0.5,1,2,4")
    parser.add_argument("--oracles", default=",".join(registry.ORACLES))
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--secure", action="store_true",
                        help="Perturb with the OS CSPRNG instead of a seeded generator.")
    args = parser.parse_args(argv)
    seed = None if args.secure else args.seed
    epsilons = [float(e) for e in args.epsilons.split(",")]
    runs = []
    for name in args.oracles.split(","):
        domains = [args.domain_size] + ([args.small_domain] if name == "grr" else [])
        for d in domains:
            for epsilon in epsilons:
                runs.append(one(name, epsilon, d, args.reports, seed))
    print(json.dumps({"reports_per_value": args.reports, "alpha": audit.DEFAULT_ALPHA,
                      "selection_fraction": audit.DEFAULT_SELECTION_FRACTION,
                      "randomness": "OS CSPRNG" if args.secure else f"seeded ({args.seed})",
                      "machine": platform.processor() or platform.machine(), "runs": runs},
                     indent=1))


if __name__ == "__main__":
    main()
