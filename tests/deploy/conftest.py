"""Fixtures of the deployment tests: report files for the jobs to run on each local runner."""

from __future__ import annotations

import fastavro
import numpy as np
import pytest

import ldpflow
from ldpflow.pipelines import common, heavy_hitters, simulate
from tests import wire_support as formats
from tests.wire_support import reports_to_records

#: The PEM configuration of ``pem_reports``, as the scheduled job is given it.
PEM_FLAGS = ["--bits=16", "--k=8"]
#: The day ``pem_reports`` holds, as the scheduled job's layout has it (REPORTS/dt=DAY/).
PEM_DAY = "2026-11-29"


@pytest.fixture(scope="session")
def reports(tmp_path_factory):
    """Reports of three oracles in three formats, plus a file with broken records."""
    root = tmp_path_factory.mktemp("reports")
    for name, fmt, users in (("grr", "avro", 3000), ("olh", "json", 2000), ("hr", "parquet", 1500)):
        simulate.run(["--oracle", name, "--epsilon", "1.0", "--domain_size", "32",
                      "--users", str(users), "--seed", "11", "--shards", "3",
                      "--format", fmt, "--output", str(root / name)])
    oracle = ldpflow.oracle("oue", epsilon=2.0, domain_size=16)
    rng = np.random.default_rng(4)
    n = 400
    records = reports_to_records(oracle, oracle.perturb(rng.integers(0, 16, n), rng=rng),
                                 [f"b{i}" for i in range(n)], [f"v{i}" for i in range(n)],
                                 np.zeros(n, dtype=int))
    records[5] = dict(records[5], oracle="nope")
    records[6] = dict(records[6], epsilon=-1.0)
    records[7] = dict(records[7], bits=b"\x01")
    (root / "oue").mkdir()
    with open(root / "oue" / "reports-broken.jsonl", "w", encoding="utf-8") as f:
        formats.write_json_lines(f, records)
        f.write("{not json\n")
    return str(root)


@pytest.fixture(scope="session")
def pem_reports(tmp_path_factory):
    """One day of PEM reports under ``ROOT/dt=PEM_DAY/``: epsilon 4 (the result), a few of
    epsilon 2 and another configuration, and broken records (dead letters for
    ``--expect_epsilon=4.0``); returns ROOT."""
    root = tmp_path_factory.mktemp("pem")
    day = root / f"dt={PEM_DAY}"
    # The clients use the configuration the job derives from --k, --bits and --expect_epsilon alone
    # (as the scheduled job is given them).
    _, args = common.job_options("heavy-hitters", ["--input=-", "--output=-", *PEM_FLAGS,
                                                   "--expect_epsilon=4.0"])
    pem, _ = heavy_hitters.configure(args)
    shape = [f"--{name}={getattr(pem, name)}"
             for name in ("query_limit", "start_bits", "step_bits", "num_groups", "hash_range")]
    for epsilon, users, seed in ((4.0, 6000, 11), (2.0, 300, 12)):
        simulate.run(["--oracle", "pem", *PEM_FLAGS, *(shape if epsilon == 4.0 else ()),
                      f"--epsilon={epsilon}", "--domain_size=300", f"--users={users}",
                      f"--seed={seed}", "--shards=3", f"--output={root}/eps{seed}"])
        for i, path in enumerate(sorted((root / f"eps{seed}").glob("*.avro"))):
            day.mkdir(exist_ok=True)
            path.rename(day / f"reports-eps{seed}-{i}.avro")
    with open(sorted(day.glob("*.avro"))[0], "rb") as f:
        good = list(fastavro.reader(f))[:2]
    broken = [dict(good[0], oracle="nope"), dict(good[1], pem=dict(good[1]["pem"], group=99))]
    with open(day / "reports-broken.avro", "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(ldpflow.schemas.load_schema("report")), broken)
    return str(root)
