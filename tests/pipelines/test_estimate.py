"""``ldpflow simulate`` -> ``ldpflow estimate`` end to end, and exact dead-letter accounting."""

from __future__ import annotations

import glob
import gzip
import json
import math

import fastavro
import numpy as np
import pytest
from scipy import stats

import ldpflow
from ldpflow.pipelines import estimate, simulate
from tests import wire_support as formats
from tests.wire_support import reports_to_records

pytestmark = pytest.mark.pipeline


def simulate_to(tmp_path, name, users, **extra):
    out = tmp_path / f"reports-{name}"
    args = ["--oracle", name, "--epsilon", "1.0", "--domain_size", "64", "--users", str(users),
            "--distribution", "zipf:1.1", "--seed", "5", "--output", str(out), "--shards", "2"]
    for flag, value in extra.items():
        args += [f"--{flag}", str(value)]
    truth = simulate.run(args)
    return out, np.asarray(truth["counts"]) / truth["users"]


@pytest.mark.parametrize("name,fmt", [("grr", "avro"), ("olh", "avro"), ("oue", "json"),
                                      ("hr", "parquet"), ("ss", "avro"), ("onebit", "avro")])
def test_simulate_then_estimate_is_within_k_sigma(tmp_path, name, fmt):
    users = 2**15
    out, truth = simulate_to(tmp_path, name, users, format=fmt)
    doc = estimate.run([f"--input={out}/reports-*", f"--output={tmp_path}/est",
                        "--methods=base,norm-sub"])
    (result,) = doc["results"]
    assert result["oracle"] == name and result["n"] == users and result["dead_letters"] == 0
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=64)
    sd = np.sqrt(oracle.variance(users, truth))
    if name == "onebit":  # columns hold i.i.d. subsamples of the population
        sd = np.sqrt(sd**2 + oracle.column_sampling_variance(users, truth))
    z = stats.norm.ppf(1 - 1e-3 / (2 * 64))
    base = np.asarray(result["estimates"]["base"])
    assert np.all(np.abs(base - truth) <= z * sd)
    assert math.isclose(sum(result["estimates"]["norm-sub"]), 1.0, rel_tol=1e-9)
    assert min(result["estimates"]["norm-sub"]) >= 0
    avro = list(fastavro.reader(open(f"{tmp_path}/est/estimates.avro", "rb")))
    assert {r["method"] for r in avro} == {"base", "norm-sub"}
    assert avro[0]["n"] == users and avro[0]["window_start"] is None


def test_mixed_keys_are_estimated_separately(tmp_path):
    a, _ = simulate_to(tmp_path, "grr", 3000)
    b, _ = simulate_to(tmp_path, "olh", 2000)
    doc = estimate.run([f"--input={tmp_path}/reports-*/*.avro", f"--output={tmp_path}/est",
                        "--methods=base"])
    assert sorted((r["oracle"], r["n"]) for r in doc["results"]) == [("grr", 3000), ("olh", 2000)]
    assert doc["records"] == 5000


def test_dead_letter_accounting_is_exact(tmp_path):
    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=64)
    rng = np.random.default_rng(3)
    n = 500
    reports = oracle.perturb(rng.integers(0, 64, n), rng=rng)
    records = reports_to_records(oracle, reports, [f"r{i}" for i in range(n)],
                                 [f"u{i}" for i in range(n)], np.zeros(n, dtype=int))
    broken = {7: dict(records[7], bucket=99), 8: dict(records[8], oracle="nope"),
              9: dict(records[9], epsilon=0.0), 10: dict(records[10], seed=None)}
    records = [broken.get(i, r) for i, r in enumerate(records)]
    with open(tmp_path / "a.avro", "wb") as f:
        formats.write_avro(f, records[:250])
    lines = [json.dumps(formats.to_json_record(r)) for r in records[250:]]
    lines[3] = "{not json"
    lines[4] = json.dumps({"report_id": "x"})
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    doc = estimate.run([f"--input={tmp_path}/*.*", f"--output={tmp_path}/est", "--methods=base"])
    results = {r["oracle"]: r for r in doc["results"]}
    dead_total = doc["dead_letters"]["total"]
    assert dead_total == 6
    assert doc["records"] == n == results["olh"]["n"] + dead_total
    assert results["olh"]["n"] == n - 6
    assert results["olh"]["dead_letters"] == 2  # bucket out of range, missing seed: same key
    letters = [json.loads(line) for path in glob.glob(f"{tmp_path}/est/dead_letters/*.jsonl")
               for line in open(path)]
    assert len(letters) == 6
    reasons = {letter["reason"].split(":")[0] for letter in letters}
    assert reasons == {"bucket outside [0, 4)", "unknown oracle 'nope' (known", "invalid parameters",
                       "missing payload field 'seed' for oracle olh", "malformed JSON at line 4",
                       "malformed record"}


def test_expected_parameters_turn_others_into_dead_letters(tmp_path):
    simulate_to(tmp_path, "grr", 1000)
    doc = estimate.run([f"--input={tmp_path}/reports-grr/*.avro", f"--output={tmp_path}/est",
                        "--methods=base", "--expect_epsilon=2.0"])
    (result,) = doc["results"]
    assert result["n"] == 0 and result["dead_letters"] == 1000 and result["error"]
    assert doc["records"] == 1000


def test_bad_methods_fail_before_the_pipeline(tmp_path):
    with pytest.raises(SystemExit, match="--methods must name methods among"):
        estimate.run([f"--input={tmp_path}/x", f"--output={tmp_path}/o", "--methods=norm,bogus"])


def test_simulate_rejects_bad_flags(tmp_path, capsys):
    with pytest.raises(SystemExit):
        simulate.run(["--oracle", "grr", "--epsilon", "-1", "--domain_size", "8", "--users", "5",
                      "--output", str(tmp_path)])
    assert "epsilon must be in (0, inf)" in capsys.readouterr().err


def test_inputs_are_checked_before_the_pipeline(tmp_path):
    with pytest.raises(SystemExit, match="matched no files"):
        estimate.run([f"--input={tmp_path}/none-*.avro", f"--output={tmp_path}/o"])
    (tmp_path / "reports.txt").write_text("x")
    with pytest.raises(SystemExit, match="cannot tell the format of .*reports.txt"):
        estimate.run([f"--input={tmp_path}/*", f"--output={tmp_path}/o"])


def test_a_truncated_avro_file_keeps_its_readable_records(tmp_path):
    out, _ = simulate_to(tmp_path, "grr", 20_000)
    path = sorted(glob.glob(f"{out}/*.avro"))[0]
    records = list(fastavro.reader(open(path, "rb")))
    from ldpflow.schemas import load_schema
    with open(tmp_path / "whole.avro", "wb") as f:  # small blocks: the cut leaves whole ones
        fastavro.writer(f, load_schema("report"), records, sync_interval=16_000)
    data = (tmp_path / "whole.avro").read_bytes()
    with open(tmp_path / "cut.avro", "wb") as f:
        f.write(data[: len(data) * 2 // 3])
    doc = estimate.run([f"--input={tmp_path}/cut.avro", f"--output={tmp_path}/est",
                        "--methods=base"])
    (result,) = doc["results"]
    blocks = [b.num_records for b in fastavro.block_reader(open(tmp_path / "whole.avro", "rb"))]
    whole = int(np.searchsorted(np.cumsum(blocks), result["n"], side="right"))
    assert result["n"] == sum(blocks[:whole]) > 0  # every whole block before the cut counted
    (reason,) = doc["dead_letters"]["by_reason"]
    assert "truncated block" in reason and f"({blocks[whole]} records lost)" in reason
    assert doc["dead_letters"]["total"] == blocks[whole]  # the cut block, from its header


@pytest.mark.parametrize("command,flag", [("estimate", "--expect_domain_size"),
                                          ("stream", "--allowed_lateness")])
def test_job_help_lists_the_jobs_flags(command, flag, capsys):
    from ldpflow.pipelines import cli

    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"usage: ldpflow {command}" in out and flag in out


def test_no_wait_until_finish_returns_once_submitted(tmp_path):
    out, _ = simulate_to(tmp_path, "grr", 500)
    doc = estimate.run([f"--input={out}/*.avro", f"--output={tmp_path}/est",
                        "--no_wait_until_finish"])
    assert doc == {"submitted": True, "output": f"{tmp_path}/est"}
