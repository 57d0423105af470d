"""``ldpflow audit``: ldpflow's own perturbation, and report files of any client."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from ldpflow.core import audit
from ldpflow.core.oracles import registry
from ldpflow.pipelines import audit as audit_job
from ldpflow.pipelines import cli, simulate
from ldpflow.wire import formats
from tests.core.test_audit import SwappedOUE, doubled_epsilon


def write_reports(path, oracle, value, n, seed, fmt="avro"):
    """``n`` reports of ``value`` by ``oracle`` (any client), as one report file."""
    rng = np.random.default_rng(seed)
    values = np.full(n, value, dtype=np.int64)
    kwargs = {"columns": np.arange(n) % oracle.order} if oracle.name == "onebit" else {}
    reports = oracle.perturb(values, rng, **kwargs)
    table = formats.reports_table(oracle, reports, formats.numbered_ids(f"r{seed}-", 0, n),
                                  formats.numbered_ids("u", 0, n), np.zeros(n, np.int64))
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        formats.write_reports(f, fmt, table)
    return str(path)


def client_files(tmp_path, oracle, n=40_000, fmt="avro", suffix=".avro"):
    first = write_reports(tmp_path / f"v0{suffix}", oracle, 0, n, 1, fmt)
    other = write_reports(tmp_path / f"v1{suffix}", oracle, 1, n, 2, fmt)
    return ["--input", first, "--value", "0", "--other_input", other, "--other_value", "1"]


def test_own_perturbation_passes_and_writes_the_document(tmp_path, capsys):
    out = tmp_path / "audit.json"
    status = audit_job.run(["--oracle", "olh", "--expect_epsilon", "1", "--domain_size", "1024",
                            "--reports", "50000", "--seed", "3", "--output", str(out)])
    verdict = capsys.readouterr().out.strip()
    document = json.loads(out.read_text())
    assert status == 0
    assert verdict.startswith("PASS: olh epsilon lower bound ")
    assert document["verdict"] == "pass" and document["conforms"]
    assert document["claimed_epsilon"] == 1.0 and document["alpha"] == 0.01
    assert document["n"]["value"] == document["n"]["other_value"] == 50_000
    assert 0 < document["epsilon_lower_bound"] <= 1.0
    event = document["selected_event"]
    assert event["numerator"]["hits"] <= event["numerator"]["trials"]
    assert event["log_ratio_bound"] == pytest.approx(document["epsilon_lower_bound"])
    assert document["source"] == {"mode": "oracle", "perturbation": "ldpflow", "seed": 3,
                                  "randomness": "seeded numpy generator"}
    assert len(document["cell_counts"]["reduced"]["labels"]) == 8


@pytest.mark.parametrize("name,extra", [
    ("cms", ["--hash_range", "64", "--num_hashes", "16"]),
    ("hcms", ["--hash_range", "64", "--num_hashes", "16"]),
    ("pgr", []),
])
def test_own_perturbation_of_the_sketches_and_pgr_passes(tmp_path, capsys, name, extra):
    out = tmp_path / "audit.json"
    status = audit_job.run(["--oracle", name, "--expect_epsilon", "1", "--domain_size", "256",
                            "--reports", "20000", "--seed", "4", "--output", str(out), *extra])
    assert status == 0
    assert capsys.readouterr().out.startswith(f"PASS: {name} epsilon lower bound ")
    document = json.loads(out.read_text())
    assert 0.0 <= document["epsilon_lower_bound"] <= 1.0
    assert document["selected_event"]["cell_map"] == "reduced"
    if extra:
        assert document["parameters"]["hash_range"] == 64
        assert document["parameters"]["num_hashes"] == 16


def test_the_json_goes_to_stdout_and_the_verdict_to_stderr_without_output(capsys):
    status = cli.main(["audit", "--oracle", "grr", "--expect_epsilon", "2", "--domain_size", "4",
                       "--reports", "2000"])  # unseeded: the OS CSPRNG
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert status == 0
    assert document["source"]["randomness"] == "OS CSPRNG (os.urandom)"
    assert captured.err.splitlines()[-1].startswith("PASS: grr epsilon lower bound")


@pytest.mark.parametrize("fmt,suffix", [("avro", ".avro"), ("json", ".jsonl.gz"),
                                        ("parquet", ".parquet")])
def test_a_conforming_clients_files_pass(tmp_path, capsys, fmt, suffix):
    oracle = registry.make("oue", epsilon=1.0, domain_size=16)
    out = tmp_path / "audit.json"
    status = audit_job.run(client_files(tmp_path, oracle, 20_000, fmt, suffix)
                           + ["--output", str(out)])
    document = json.loads(out.read_text())
    assert status == 0, capsys.readouterr()
    assert document["oracle"] == "oue" and document["parameters"]["domain_size"] == 16
    assert document["source"]["mode"] == "files"
    assert document["source"]["dead_letters"]["count"] == 0
    assert document["conforms"]


@pytest.mark.parametrize("name,d", [("grr", 16), ("olh", 16), ("ss", 4), ("onebit", 16),
                                    ("cms", 16), ("hcms", 16), ("pgr", 16)])
def test_a_client_with_doubled_epsilon_fails(tmp_path, capsys, name, d):
    # ss at d = 4: the subset size is 1 at epsilon 1 and 2, so the reports stay valid
    oracle = doubled_epsilon(registry.make(name, epsilon=1.0, domain_size=d))
    status = audit_job.run(client_files(tmp_path, oracle) + ["--output", str(tmp_path / "a")])
    verdict = capsys.readouterr().out
    assert status == 1
    assert verdict.startswith(f"FAIL: {name} epsilon lower bound ")
    assert json.loads((tmp_path / "a").read_text())["epsilon_lower_bound"] > 1.0


def test_a_client_whose_reports_are_all_invalid_fails(tmp_path, capsys):
    """SS with doubled epsilon at d = 16 draws subsets of 2 values where 4 are claimed: no
    report is valid, which is a failed audit (status 1), not a usage error."""
    oracle = doubled_epsilon(registry.make("ss", epsilon=1.0, domain_size=16))
    out = tmp_path / "a.json"
    assert audit_job.run(client_files(tmp_path, oracle, 2000) + ["--output", str(out)]) == 1
    verdict = capsys.readouterr().out.strip()
    assert verdict == ("FAIL: --input holds no valid reports: 2000 records refused as reports "
                       "no conforming client could produce (subset does not hold exactly 4 "
                       "values)")
    document = json.loads(out.read_text())
    assert document["verdict"] == "fail"
    assert document["source"]["dead_letters"]["other_input"]["count"] == 2000


def test_swapped_oue_passes_the_bound_and_fails_strict_conformance(tmp_path, capsys):
    files = client_files(tmp_path, SwappedOUE(epsilon=1.0, domain_size=16))
    assert audit_job.run(files + ["--output", str(tmp_path / "a")]) == 0
    assert "contradict the claimed oue law" in capsys.readouterr().out
    assert audit_job.run(files + ["--output", str(tmp_path / "a"), "--strict"]) == 1


def test_reports_of_two_parameter_sets_are_a_usage_error_naming_them(tmp_path, capsys):
    first = write_reports(tmp_path / "a.avro", registry.make("grr", epsilon=1.0,
                                                             domain_size=8), 0, 100, 1)
    other = write_reports(tmp_path / "b.avro", registry.make("grr", epsilon=2.0,
                                                             domain_size=8), 1, 100, 2)
    status = audit_job.run(["--input", first, "--value", "0", "--other_input", other,
                            "--other_value", "1"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert err.startswith("ldpflow audit: error: all reports must share one parameter set, "
                          "found 2: ")
    assert '"epsilon": 1.0' in err and '"epsilon": 2.0' in err
    assert "(100 in --input, 0 in --other_input)" in err


def test_simulated_files_of_one_value_can_be_audited(tmp_path, capsys):
    """``ldpflow simulate --values_file`` makes the files of one input."""
    args = []
    for value, flag in ((3, "--input"), (5, "--other_input")):
        values = tmp_path / f"values{value}.txt"
        values.write_text("\n".join([str(value)] * 5000) + "\n")
        simulate.run(["--oracle", "hr", "--epsilon", "1", "--domain_size", "8",
                      "--values_file", str(values), "--seed", str(value), "--shards", "1",
                      "--output", str(tmp_path / f"sim{value}")])
        args += [flag, str(tmp_path / f"sim{value}" / "*.avro"),
                 "--value" if flag == "--input" else "--other_value", str(value)]
    assert audit_job.run(args + ["--output", str(tmp_path / "a.json")]) == 0
    document = json.loads((tmp_path / "a.json").read_text())
    assert document["n"]["value"] == 5000 and document["value"] == 3
    assert document["other_value"] == 5


@pytest.mark.parametrize("argv,message", [
    (["--oracle", "grr", "--expect_epsilon", "1", "--reports", "100"],
     "give --domain_size (an audit of ldpflow's own perturbation)"),
    (["--oracle", "grr", "--expect_epsilon", "1", "--domain_size", "4", "--reports", "100",
      "--value", "2", "--other_value", "2"], "value and other_value must differ"),
    (["--oracle", "grr", "--expect_epsilon", "1", "--domain_size", "4", "--reports", "10"],
     "--reports must be >= 20, got 10"),
    (["--oracle", "oue", "--expect_epsilon", "1", "--domain_size", "4", "--reports", "100",
      "--hash_range", "4"], "--hash_range applies to olh, blh, cms, hcms only"),
    (["--oracle", "olh", "--expect_epsilon", "1", "--domain_size", "4", "--reports", "100",
      "--num_hashes", "4"], "--num_hashes applies to cms, hcms only"),
    (["--oracle", "grr", "--expect_epsilon", "1", "--domain_size", "4", "--reports", "100",
      "--alpha", "1.5"], "--alpha"),
    (["--input", "x.avro", "--other_input", "y.avro", "--other_value", "1"],
     "--value and --other_value are required"),
    (["--input", "x.avro", "--value", "0", "--other_input", "y.avro", "--other_value", "1",
      "--expect_epsilon", "1"], "--expect_epsilon do not apply to report files"),
    (["--input", "/nonexistent/*.avro", "--value", "0", "--other_input", "y.avro",
      "--other_value", "1"], "--input '/nonexistent/*.avro' matched no files"),
])
def test_usage_errors_are_one_line_and_status_2(capsys, argv, message):
    assert audit_job.run(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ldpflow audit: error: ")
    assert message in err[0]


def test_help_lists_both_modes(capsys):
    assert audit_job.run(["--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--oracle", "--reports", "--input", "--other_input", "--alpha", "--strict"):
        assert flag in out
    assert "(default: 0.01)" in out


def test_help_offers_the_audited_oracles_only(capsys):
    audit_job.run(["--help"])
    assert "{" + ",".join(audit.AUDITED_ORACLES) + "}" in capsys.readouterr().out
