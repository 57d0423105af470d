"""``ldpflow simulate`` -> ``ldpflow estimate`` end to end, and exact dead-letter accounting."""

from __future__ import annotations

import glob
import gzip
import json
import math
import re

import fastavro
import numpy as np
import pytest
from scipy import stats

import ldpflow
from ldpflow.pipelines import estimate, simulate
from tests import wire_support as formats
from tests.wire_support import reports_to_records

pytestmark = pytest.mark.pipeline


def estimate_document(argv):
    """Run ``ldpflow estimate`` on Beam (unless ``argv`` names an engine); its
    ``estimates.json``, checked against the run's counts."""
    summary = estimate.run(["--engine=beam", *argv])
    output = next(arg.split("=", 1)[1] for arg in argv if arg.startswith("--output="))
    with open(f"{output}/estimates.json", encoding="utf-8") as f:
        document = json.load(f)
    assert summary["records"] == document["records"]
    assert summary["reports_estimated"] == document["reports_estimated"]
    assert summary["duplicates"] == document["duplicates"]
    assert summary["capped"] == document.get("contribution", {}).get("reports_capped", 0)
    assert summary["dead_letters"] == document["dead_letters"]["total"]
    return document


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
    doc = estimate_document([f"--input={out}/reports-*", f"--output={tmp_path}/est",
                        "--methods=base,norm-sub"])
    (result,) = doc["results"]
    assert result["oracle"] == name and result["n"] == users and result["dead_letters"] == 0
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=64)
    sd = np.sqrt(oracle.variance(users, truth))  # one-bit: with the column sampling
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
    doc = estimate_document([f"--input={tmp_path}/reports-*/*.avro", f"--output={tmp_path}/est",
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
    doc = estimate_document([f"--input={tmp_path}/*.*", f"--output={tmp_path}/est",
                             "--methods=base"])
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
    assert reasons == {"bucket outside [0, 4)", "unknown oracle 'nope' (known",
                       "invalid parameters",
                       "missing payload field 'seed' for oracle olh", "malformed JSON at line 4",
                       "malformed record"}


def test_expected_parameters_turn_others_into_dead_letters(tmp_path):
    simulate_to(tmp_path, "grr", 1000)
    doc = estimate_document([f"--input={tmp_path}/reports-grr/*.avro", f"--output={tmp_path}/est",
                        "--methods=base", "--expect_epsilon=2.0"])
    (result,) = doc["results"]
    assert result["n"] == 0 and result["dead_letters"] == 1000 and result["error"]
    assert doc["records"] == 1000


def test_bad_methods_fail_before_the_pipeline(tmp_path):
    with pytest.raises(SystemExit, match="--methods must name methods among"):
        estimate.run([f"--input={tmp_path}/x", f"--output={tmp_path}/o", "--methods=norm,bogus"])


def test_simulate_rejects_bad_flags(tmp_path, capsys):
    with pytest.raises(SystemExit) as excinfo:
        simulate.run(["--oracle", "grr", "--epsilon", "-1", "--domain_size", "8", "--users", "5",
                      "--output", str(tmp_path)])
    assert "epsilon must be in (0, inf)" in excinfo.value.code


@pytest.mark.parametrize("engine", ["beam", "local"])
def test_inputs_are_checked_before_the_pipeline(tmp_path, engine):
    with pytest.raises(SystemExit, match="matched no files"):
        estimate.run([f"--engine={engine}", f"--input={tmp_path}/none-*.avro",
                      f"--output={tmp_path}/o"])
    (tmp_path / "reports.txt").write_text("x")
    with pytest.raises(SystemExit) as refused:
        estimate.run([f"--engine={engine}", f"--input={tmp_path}/*", f"--output={tmp_path}/o"])
    assert re.fullmatch(r"ldpflow estimate: error: cannot tell the format of .*reports.txt.* "
                        r"\(--input_format\)", refused.value.code)  # the same line on both
    assert not (tmp_path / "o").exists()


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
    doc = estimate_document([f"--input={tmp_path}/cut.avro", f"--output={tmp_path}/est",
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
    doc = estimate.run(["--engine=beam", f"--input={out}/*.avro", f"--output={tmp_path}/est",
                        "--no_wait_until_finish"])
    assert doc == {"submitted": True, "output": f"{tmp_path}/est"}


@pytest.mark.parametrize("fmt", ["avro", "json", "parquet"])
def test_repeated_report_ids_are_counted_once_and_reported(tmp_path, fmt):
    out, _ = simulate_to(tmp_path, "olh", 4000, format=fmt)
    suffix = {"avro": ".avro", "json": ".jsonl", "parquet": ".parquet"}[fmt]
    first = sorted(out.glob(f"*{suffix}"))[0]
    (out / f"again{suffix}").write_bytes(first.read_bytes())  # one shard delivered twice
    copies = 2000  # the shard's reports
    once = estimate_document([f"--input={out}/reports-*", f"--output={tmp_path}/once",
                         "--methods=base"])
    twice = estimate_document([f"--input={out}/*{suffix}", f"--output={tmp_path}/twice",
                          "--methods=base"])
    plain = estimate_document([f"--input={out}/*{suffix}", f"--output={tmp_path}/plain",
                          "--methods=base", "--dedup=none"])
    (a,), (b,), (c,) = once["results"], twice["results"], plain["results"]
    assert b["n"] == a["n"] == 4000 and b["duplicates"] == copies
    assert b["estimates"]["base"] == a["estimates"]["base"]  # the copies change nothing
    assert twice["records"] == 6000 == twice["reports_estimated"] + twice["duplicates"] + \
        twice["dead_letters"]["total"]
    assert c["n"] == 6000 and c["duplicates"] == 0 and plain["deduplication"] == "none"


def test_a_file_read_as_several_ranges_counts_every_record_once(tmp_path):
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from ldpflow.transforms.estimate import EstimateReports
    from ldpflow.transforms.io import PlanRangesFn, ReadReports

    out, _ = simulate_to(tmp_path, "grr", 30_000, format="json", shards=1)
    (path,) = out.glob("*.jsonl")
    size = path.stat().st_size
    assert size > 1_000_000
    whole = estimate_document([f"--input={path}", f"--output={tmp_path}/whole", "--methods=base"])
    want = (30_000, 0, tuple(whole["results"][0]["estimates"]["base"]))
    with TestPipeline(runner="FnApiRunner") as p:
        read = p | ReadReports(str(path), keep=("id_hashes", "report_ids"), range_bytes=200_000)
        got = ({"reports": read["reports"], "dead_letters": read["dead_letters"]}
               | EstimateReports(["base"], dedup=True)
               | beam.Map(lambda r: (r["n"], r["duplicates"], tuple(r["estimates"]["base"]))))
        assert_that(got, equal_to([want]))
    ranges = list(PlanRangesFn(range_bytes=200_000).process(
        type("F", (), {"metadata": type("M", (), {"path": str(path), "size_in_bytes": size})})))
    assert len(ranges) == -(-size // 200_000) > 5  # the file was read as many ranges


def test_exit_status_tells_whether_reports_were_estimated(tmp_path, capsys):
    from ldpflow.pipelines import cli

    out, _ = simulate_to(tmp_path, "grr", 600)
    ok = cli.main(["estimate", "--engine=beam", f"--input={out}/reports-*",
                   f"--output={tmp_path}/ok", "--methods=base"])
    refused = cli.main(["estimate", "--engine=beam", f"--input={out}/reports-*",
                        f"--output={tmp_path}/no", "--methods=base", "--expect_domain_size=32"])
    err = capsys.readouterr().err
    assert ok == 0 and refused == 1
    assert "no valid report was estimated (600 records: 0 estimated" in err
    assert (tmp_path / "no" / "estimates.json").exists()  # the outputs are written anyway


def test_verdict_counts_the_dead_letter_fraction():
    document = {"records": 100, "reports_estimated": 85, "duplicates": 0, "dead_letters": 15}
    assert estimate.verdict(document, 0.2) is None
    assert estimate.verdict(document, 0.1).startswith("15.0% of the records were refused")


@pytest.mark.parametrize("flag,message", [
    ("--expect_epsilon=-1", "--expect_epsilon must be in (0, inf)"),
    ("--expect_domain_size=1", "--expect_domain_size must be >= 2"),
    ("--max_domain_size=0", "--max_domain_size must be a positive integer"),
    ("--max_epsilon=0", "--max_epsilon must be > 0"),
    ("--max_dead_letter_fraction=2", "--max_dead_letter_fraction must be in [0, 1]"),
])
def test_acceptance_flags_fail_before_the_pipeline(tmp_path, flag, message):
    out, _ = simulate_to(tmp_path, "grr", 100)
    with pytest.raises(SystemExit, match=re.escape(message)):
        estimate.run(["--engine=beam", f"--input={out}/reports-*", f"--output={tmp_path}/o", flag])


def test_a_rerun_replaces_the_whole_output_and_is_byte_identical(tmp_path):
    out, _ = simulate_to(tmp_path, "grr", 1000)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "junk.jsonl").write_text('{"oracle": "nope"}\n')
    target = tmp_path / "est"
    estimate.run(["--engine=beam", f"--input={bad}/*", f"--output={target}", "--methods=base"])
    assert [p.name for p in (target / "dead_letters").iterdir()][0].startswith("junk.jsonl-")
    estimate.run(["--engine=beam", f"--input={out}/reports-*", f"--output={target}",
                  "--methods=base"])
    first = (target / "estimates.avro").read_bytes()
    assert list((target / "dead_letters").iterdir()) == []  # no stale dead letters
    estimate.run(["--engine=beam", f"--input={out}/reports-*", f"--output={target}",
                  "--methods=base"])
    assert (target / "estimates.avro").read_bytes() == first
    assert not [p for p in target.iterdir() if p.name.startswith(".staging-")]


def test_usage_errors_exit_2_with_one_line(tmp_path, capsys):
    from ldpflow.pipelines import cli

    status = cli.main(["estimate", "--engine=beam", f"--input={tmp_path}/none-*.avro",
                       f"--output={tmp_path}/o"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err == [f"ldpflow estimate: error: --input "
                                   f"'{tmp_path}/none-*.avro' matched no files"]


def test_max_reports_per_user_keeps_each_users_earliest_reports_across_keys(tmp_path):
    from ldpflow.core.dedup import report_id_hashes

    rng = np.random.default_rng(11)
    grr = ldpflow.oracle("grr", epsilon=1.0, domain_size=16)
    olh = ldpflow.oracle("olh", epsilon=0.5, domain_size=16)
    users = 400
    sent = rng.integers(1, 6, users)  # reports per user, over both oracles
    owner = np.repeat(np.arange(users), sent)
    n = owner.size
    which = rng.random(n) < 0.7  # True: grr
    times = rng.integers(0, 20, n)  # ties in time: the report-id hash decides
    ids = [f"report-{i}" for i in range(n)]
    user_ids = [f"user-{u}" for u in owner]
    values = rng.integers(0, 16, n)
    records = []
    for oracle, mask in ((grr, which), (olh, ~which)):
        rows = np.flatnonzero(mask)
        reports = oracle.perturb(values[rows], rng=rng)
        records += reports_to_records(oracle, reports, [ids[r] for r in rows],
                                      [user_ids[r] for r in rows], times[rows])
    records.append(dict(records[0]))  # a copy of one report: deduplicated, not capped
    with open(tmp_path / "r.avro", "wb") as f:
        formats.write_avro(f, records)
    doc = estimate_document([f"--input={tmp_path}/r.avro", f"--output={tmp_path}/est",
                             "--methods=base", "--max_reports_per_user=2"])
    # The rule, row by row: each user's 2 earliest reports by (event time, id hash).
    hashes = report_id_hashes(ids)
    kept = np.zeros(n, dtype=bool)
    for user in range(users):
        rows = np.flatnonzero(owner == user)
        rows = sorted(rows, key=lambda r: (int(times[r]), int(hashes[r])))
        kept[rows[:2]] = True
    results = {r["oracle"]: r for r in doc["results"]}
    for oracle, mask in ((grr, which), (olh, ~which)):
        assert results[oracle.name]["n"] == int(np.count_nonzero(kept & mask))
        assert results[oracle.name]["capped"] == int(np.count_nonzero(~kept & mask))
    # Exact: the estimate of the kept reports alone.
    by_id = {r["report_id"]: r for r in records}
    kept_grr = [by_id[ids[r]] for r in np.flatnonzero(kept & which)]
    batches, _ = formats.parse_records(kept_grr)
    (batch,) = batches.values()
    want = grr.estimate(grr.aggregate(batch.reports)).frequencies
    assert np.allclose(results["grr"]["estimates"]["base"], want, rtol=0, atol=1e-12)
    assert doc["duplicates"] == 1
    assert doc["contribution"] == {
        "max_reports_per_user": 2, "users": users,
        "max_epsilon_per_user": max(
            sum(grr.epsilon if which[r] else olh.epsilon
                for r in np.flatnonzero(kept & (owner == u)))
            for u in range(users)),
        "reports_capped": int(np.count_nonzero(~kept))}
    assert doc["records"] == n + 1 == (doc["reports_estimated"] + doc["duplicates"]
                                       + doc["contribution"]["reports_capped"]
                                       + doc["dead_letters"]["total"])


@pytest.mark.parametrize("name", ["rappor", "loloha"])
def test_longitudinal_reports_are_estimated_round_by_round(tmp_path, name):
    from ldpflow.core.longitudinal import LONGITUDINAL_PROTOCOLS, simulate_rounds

    protocol = LONGITUDINAL_PROTOCOLS[name](epsilon=1.0, epsilon_permanent=4.0, domain_size=32)
    rng = np.random.default_rng(17)
    n, d = 6000, 32
    first = rng.integers(0, 8, n)  # a skewed population
    values = np.stack([first, np.where(rng.random(n) < 0.3, rng.integers(0, d, n), first)])
    rounds = simulate_rounds(protocol, values, rng)
    oracle = protocol.oracle
    for day, reports in enumerate(rounds):
        table = formats.reports_table(oracle, reports, [f"d{day}-r{i}" for i in range(n)],
                                      [f"device-{i}" for i in range(n)],
                                      np.full(n, 86_400_000 * day))
        with open(tmp_path / f"day{day}.avro", "wb") as f:
            formats.write_avro(f, table.to_pylist())
    z = stats.norm.ppf(1 - 1e-3 / (2 * d * 2))
    for day in range(2):
        doc = estimate_document([f"--input={tmp_path}/day{day}.avro",
                                 f"--output={tmp_path}/est{day}", "--methods=base"])
        (result,) = doc["results"]
        truth = np.bincount(values[day], minlength=d) / n
        assert result["oracle"] == oracle.name and result["n"] == n
        sd = np.sqrt(oracle.variance(n, truth))
        assert np.all(np.abs(np.asarray(result["estimates"]["base"]) - truth) <= z * sd)
    # Both days in one run, one report per device: the earlier day's.
    doc = estimate_document([f"--input={tmp_path}/day*.avro", f"--output={tmp_path}/both",
                             "--methods=base", "--max_reports_per_user=1"])
    assert doc["reports_estimated"] == n and doc["contribution"]["reports_capped"] == n
    assert doc["contribution"]["max_epsilon_per_user"] == 1.0


# -- uncertainty and run metadata --------------------------------------------------------------
def test_results_carry_standard_errors_intervals_top_and_significant_values(tmp_path):
    from ldpflow.core import intervals

    users = 2**15
    out, _ = simulate_to(tmp_path, "grr", users)
    doc = estimate_document([f"--input={out}/reports-*", f"--output={tmp_path}/est",
                             "--methods=base,norm-sub,ibu"])
    (result,) = doc["results"]
    oracle = ldpflow.oracle("grr", epsilon=1.0, domain_size=64)
    base = np.asarray(result["estimates"]["base"])
    # Exactly the core's plug-in standard errors and normal intervals of the raw estimate.
    se = np.sqrt(oracle.variance(users, np.clip(base, 0, 1)))
    np.testing.assert_array_equal(result["standard_errors"], se)
    bounds = result["intervals"]
    z = intervals.normal_quantile(0.95)
    assert bounds["confidence"] == 0.95 and bounds["z"] == z and bounds["applies_to"] == "base"
    np.testing.assert_array_equal(bounds["low"], base - z * se)
    np.testing.assert_array_equal(bounds["high"], base + z * se)
    top = result["top"]
    assert len(top) == 20
    assert [e["value"] for e in top] == np.lexsort((np.arange(64), -base))[:20].tolist()
    assert all(e["estimate"] == base[e["value"]] and e["se"] == se[e["value"]] for e in top)
    significant = result["significant"]
    assert [e["value"] for e in significant] == [
        v for v in np.lexsort((np.arange(64), -base)).tolist() if base[v] - z * se[v] > 0]
    assert result["significant_count"] == len(significant) > 0
    assert result["significant_by_chance"] == 64 * (1 - 0.95) / 2
    ibu = np.asarray(result["estimates"]["ibu"])
    assert ibu.min() >= 0 and math.isclose(ibu.sum(), 1.0, rel_tol=1e-12)
    records = list(fastavro.reader(open(f"{tmp_path}/est/estimates.avro", "rb")))
    assert sorted(r["method"] for r in records) == ["base", "ibu", "norm-sub"]
    for record in records:  # every method's record carries the raw estimate's intervals
        assert record["base_standard_errors"] == result["standard_errors"]
        assert record["base_interval_low"] == bounds["low"]
        assert record["base_interval_high"] == bounds["high"]
        assert record["interval_confidence"] == 0.95


def test_run_metadata_is_in_the_document_and_only_its_deterministic_part_in_avro(tmp_path):
    import datetime

    out, _ = simulate_to(tmp_path, "olh", 3000)
    pattern = f"{out}/reports-*"
    doc = estimate_document([f"--input={pattern}", f"--output={tmp_path}/est",
                             "--methods=base,norm-sub", "--expect_oracle=olh"])
    run = doc["run"]
    assert run["ldpflow_version"] == ldpflow.__version__
    assert run["inputs"] == {"pattern": pattern, "files": 2}
    assert run["runner"] == "FnApiRunner"
    assert run["methods"] == ["base", "norm-sub"]
    assert run["policy"]["expect"] == {"oracle": "olh"}
    assert run["policy"]["max_domain_size"] == 2**24 and "max_keys" in run["policy"]

    def parse(text):
        assert text.endswith("Z")
        return datetime.datetime.fromisoformat(text[:-1] + "+00:00")

    assert parse(run["started"]) <= parse(run["finished"])
    records = list(fastavro.reader(open(f"{tmp_path}/est/estimates.avro", "rb")))
    for record in records:
        assert record["ldpflow_version"] == ldpflow.__version__
        assert record["input_pattern"] == pattern and record["input_files"] == 2
        assert record["methods"] == ["base", "norm-sub"]
        assert not {"started", "finished", "runner"} & set(record)


def test_a_method_that_cannot_apply_to_a_key_is_reported_not_fatal(tmp_path):
    out, _ = simulate_to(tmp_path, "onebit", 4000)
    doc = estimate_document([f"--input={out}/reports-*", f"--output={tmp_path}/est",
                             "--methods=base,ibu"])
    (result,) = doc["results"]
    assert list(result["estimates"]) == ["base"]
    assert "one-bit, cms and hcms have no support channel" in result["method_errors"]["ibu"]
    assert len(result["standard_errors"]) == 64  # the raw estimate's uncertainty is there
    records = list(fastavro.reader(open(f"{tmp_path}/est/estimates.avro", "rb")))
    assert [r["method"] for r in records] == ["base"]


def test_poisoning_detect_flags_fake_reports_and_recovers_the_target(tmp_path):
    from ldpflow.core import poisoning

    rng = np.random.default_rng(23)
    oracle = ldpflow.oracle("oue", epsilon=1.0, domain_size=64)
    genuine, target = 20_000, 37
    values = rng.choice(64, size=genuine, p=(lambda w: w / w.sum())(
        np.arange(1, 65, dtype=float) ** -1.1))
    fakes = poisoning.fake_user_count(genuine, 0.05)
    reports = type(oracle.perturb(values[:1], rng=rng)).concat([
        oracle.perturb(values, rng=rng),
        poisoning.maximal_gain_attack(oracle, [target], fakes, rng, variant="naive")])
    n = len(reports)
    table = formats.reports_table(oracle, reports, [f"r{i}" for i in range(n)],
                                  [f"u{i}" for i in range(n)], np.zeros(n, dtype=int))
    with open(tmp_path / "r.avro", "wb") as f:
        formats.write_avro(f, table.to_pylist())
    plain = estimate_document([f"--input={tmp_path}/r.avro", f"--output={tmp_path}/plain",
                               "--methods=base"])
    doc = estimate_document([f"--input={tmp_path}/r.avro", f"--output={tmp_path}/est",
                             "--methods=base", "--poisoning=detect"])
    (result,) = doc["results"]
    assert "poisoning" not in plain["results"][0]
    section = result["poisoning"]
    assert section["flagged"] >= 0.9 * fakes  # the naive attack's reports are all caught
    truth = np.bincount(values, minlength=64)[target] / genuine
    raw_gain = plain["results"][0]["estimates"]["base"][target] - truth
    recovered = np.asarray(section["recovered_estimates"])[target] - truth
    assert raw_gain > 0.03 and abs(recovered) < raw_gain / 10


# -- the default engine (--engine auto: local without Beam's flags) ----------------------------
@pytest.mark.parametrize("extra", [[], ["--max_reports_per_user=2"], ["--poisoning=detect"]],
                         ids=["dedup", "cap", "poisoning"])
def test_the_default_run_writes_the_bytes_of_the_beam_run(tmp_path, engine_lines, extra):
    """No --engine and no Beam flag: the job plan in this process (one log line says so),
    whose outputs are the Beam job's byte for byte, but for the run's times and runner."""
    from tests.plan import inputs
    from tests.plan.test_engines import _outputs

    (tmp_path / "in").mkdir()
    files = inputs.write_inputs(tmp_path / "in")
    argv = [f"--input={files}", "--methods=base,norm-sub", *extra]
    default = estimate.run([*argv, f"--output={tmp_path}/default"])
    assert engine_lines() == ["ldpflow estimate: engine local (--engine auto: no Beam flag, "
                              "runner or remote path given; the job plan in this process)"]
    beam = estimate.run([*argv, f"--output={tmp_path}/beam", "--engine=beam"])
    document, letters, records = _outputs(tmp_path / "default")
    assert json.loads(document)["run"]["runner"] is None  # nulled: "local" against Beam's
    assert (document, letters, records) == _outputs(tmp_path / "beam")
    assert len(letters) == 2 and records
    for name in ("records", "reports_estimated", "duplicates", "capped", "dead_letters"):
        assert default[name] == beam[name], name
