"""``ldpflow heavy-hitters`` on Beam: equal to the core run on the same reports, the JSON
document, dead letters through the Beam path, decoded strings, configurations kept apart."""

from __future__ import annotations

import glob
import gzip
import json

import fastavro
import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines import heavy_hitters, simulate
from tests import wire_support as formats
from tests.wire_support import parse_records, pem_from_key, reports_to_records

pytestmark = pytest.mark.pipeline

# Five passes: prefix bits (10, 17, 24, 31, 32), 1024 candidates at most per pass.
FLAGS = ["--bits", "32", "--k", "8", "--query_limit", "1024"]


def simulate_pem(out, users=20_000, epsilon=4.0, seed=11, extra=()):
    return simulate.run(["--oracle", "pem", *FLAGS, "--epsilon", str(epsilon),
                         "--domain_size", "500", "--users", str(users), "--seed", str(seed),
                         "--output", str(out), "--shards", "3", *extra])


def run_job(argv):
    """Run the job on Beam (unless ``argv`` names an engine); its heavy_hitters.json
    document, with the run's summary under "run"."""
    summary = heavy_hitters.run(["--engine=beam", *argv])
    output = next(a.split("=", 1)[1] for a in argv if a.startswith("--output="))
    with open(f"{output}/heavy_hitters.json") as f:
        return {**json.load(f), "run": summary}


def read_records(pattern):
    records = []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            records += list(fastavro.reader(f))
    return records


def core_identify(records, threshold=None, **options):
    batches, dead = parse_records(records, trusted=True, expect={"oracle": "pem"})
    assert not dead
    ((key, batch),) = batches.items()
    pem = pem_from_key(key)[0]
    return pem, pem.identify(batch.reports, threshold=threshold, **options)


@pytest.mark.parametrize("threshold,refine", [(None, None), (0.02, None), (None, "off")])
def test_pipeline_top_k_equals_the_core_identify_exactly(tmp_path, threshold, refine):
    truth = simulate_pem(tmp_path / "reports")
    extra = [] if threshold is None else ["--threshold", str(threshold)]
    extra += [] if refine is None else ["--refine_sigma", refine]
    doc = run_job([f"--input={tmp_path}/reports/*.avro", f"--output={tmp_path}/hh",
                             *FLAGS, *extra])
    pem, expected = core_identify(read_records(f"{tmp_path}/reports/*.avro"), threshold,
                                  **({} if refine is None else {"refine_sigma": None}))
    assert [t["value"] for t in doc["top_k"]] == expected.values.tolist()
    assert [t["frequency"] for t in doc["top_k"]] == expected.frequencies.tolist()
    assert [t["count"] for t in doc["top_k"]] == expected.counts.tolist()
    assert doc["group_sizes"] == list(expected.group_sizes) == truth["group_sizes"]
    assert [s["candidates"] for s in doc["passes"]] == list(expected.pass_candidates)
    assert [s["survivors"] for s in doc["passes"]] == list(expected.pass_survivors)
    if threshold is None:  # the clear heavy hitters of Zipf(1.1) over 500 values are found
        assert hh.score_top_k([t["value"] for t in doc["top_k"]], truth["top"], 8)["f1"] >= 0.75
    assert doc["run"]["reports"] == doc["reports"] and doc["run"]["state"] == "DONE"


def test_document_shape(tmp_path):
    simulate_pem(tmp_path / "reports", users=5000)
    # 1,000 users a group: without the significance test, to fill all 8 places
    doc = run_job([f"--input={tmp_path}/reports/*.avro", f"--output={tmp_path}/hh",
                             *FLAGS, "--expect_epsilon", "4", "--significance", "off"])
    assert set(doc) >= {"top_k", "configuration", "n", "group_sizes", "passes", "results",
                        "records", "reports", "dead_letters", "elapsed_seconds"}
    assert doc["error"] is None and len(doc["results"]) == 1
    assert len(doc["top_k"]) == 8
    assert all(set(t) == {"value", "frequency", "count", "se", "low", "high"}
               and type(t["value"]) is int and t["low"] < t["frequency"] < t["high"]
               for t in doc["top_k"])
    freqs = [t["frequency"] for t in doc["top_k"]]
    assert freqs == sorted(freqs, reverse=True)
    assert doc["configuration"] == {"top_k": 8, "value_bits": 32, "epsilon": 4.0,
                                    "query_limit": 1024, "start_bits": 3, "step_bits": 7,
                                    "num_groups": 5, "hash_range": 64, "codec": "int"}
    assert doc["n"] == doc["reports"] == doc["records"] == sum(doc["group_sizes"]) == 5000
    assert doc["dead_letters"] == {"total": 0, "by_reason": {}}
    assert [s["pass"] for s in doc["passes"]] == [0, 1, 2, 3, 4]
    assert [s["label"] for s in doc["passes"]] == [
        f"prefixes of {b} bits" for b in (10, 17, 24, 31, 32)]
    assert [s["candidates"] for s in doc["passes"]] == [1024, 1024, 1024, 1024, 16]
    for entry in doc["passes"]:
        assert entry["candidates"] <= 1024 and entry["error"] is None
        assert set(entry) == {"pass", "label", "reports", "candidates", "survivors",
                              "sigma", "batches", "error"}  # timings are metrics
        assert entry["sigma"] > 0 and entry["batches"] >= 1


def test_bad_input_goes_to_dead_letters_through_beam(tmp_path):
    simulate_pem(tmp_path / "reports", users=3000)
    records = read_records(f"{tmp_path}/reports/*.avro")
    valid = list(records)

    def broken(record, **changes):
        record = dict(record, pem=dict(record["pem"]))
        for name, value in changes.items():
            (record["pem"] if name in record["pem"] else record)[name] = value
        return record

    bad = [
        broken(records[0], prefix_bits=records[0]["pem"]["prefix_bits"] + 1),  # wrong length
        broken(records[1], group=9),  # group out of range
        broken(records[2], bucket=64),  # bucket out of range
        broken(records[3], seed=None),  # missing payload
        broken(records[4], value_bits=65),  # values would lie beyond 2**64
        broken(records[5], top_k=4),  # another configuration
        broken(records[6], codec="string"),  # another codec
    ]
    for i in range(7):
        valid.remove(records[i])
    with open(tmp_path / "mixed.avro", "wb") as f:
        formats.write_avro(f, valid[:1000] + bad[:4])
    lines = [json.dumps(formats.to_json_record(r)) for r in valid[1000:] + bad[4:]]
    lines += ["{not json", json.dumps({"report_id": "x"})]
    not_json = len(lines) - 1  # its line number
    with gzip.open(tmp_path / "mixed.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    doc = run_job([f"--input={tmp_path}/mixed.*", f"--output={tmp_path}/hh", *FLAGS,
                   "--codec=int"])
    dead = doc["dead_letters"]
    assert dead["total"] == 9 and doc["records"] == 3000 + 2 == doc["reports"] + 9
    assert set(dead["by_reason"]) == {
        "prefix_bits does not match the group's length", "group outside [0, 5)",
        "bucket outside [0, 64)", "missing payload field 'seed' for oracle pem",
        "invalid parameters: value_bits must be in [1, 64], got 65",
        "parameter mismatch: top_k 4, expected 8",
        "parameter mismatch: codec 'string', expected 'int'",
        f"malformed JSON at line {not_json}: Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)",
        "malformed record: missing field 'user_id'",
    }
    letters = [json.loads(line) for path in glob.glob(f"{tmp_path}/hh/dead_letters/*.jsonl")
               for line in open(path)]
    assert len(letters) == 9
    # The valid reports give exactly the core's answer.
    _, expected = core_identify(valid)
    assert [t["value"] for t in doc["top_k"]] == expected.values.tolist()
    # Refused rows count against their configuration; other configurations get a result
    # each (n = 0), so every refused report of a known configuration is accounted for.
    assert [(r["n"], r["dead_letters"]) for r in doc["results"]] == [(2993, 4), (0, 1), (0, 1)]
    assert {r["configuration"]["top_k"] for r in doc["results"]} == {8, 4}


def test_string_values_come_back_decoded(tmp_path):
    words = ["the"] * 3000 + ["of"] * 2200 + ["and"] * 1600 + ["to"] * 1200
    words += [f"w{i % 1000:03d}" for i in range(2000)]
    values_file = tmp_path / "words.txt"
    values_file.write_text("\n".join(words) + "\n", encoding="utf-8")
    flags = ["--bits", "32", "--k", "4", "--query_limit", "256"]
    truth = simulate.run(["--oracle", "pem", *flags, "--epsilon", "4", "--codec", "string",
                          "--values_file", str(values_file), "--seed", "3",
                          "--output", str(tmp_path / "reports"), "--shards", "2"])
    assert [t["value"] for t in truth["top"][:4]] == ["the", "of", "and", "to"]
    doc = run_job([f"--input={tmp_path}/reports/*.avro", f"--output={tmp_path}/hh",
                             *flags, "--codec", "string"])
    assert [t["value"] for t in doc["top_k"]] == ["the", "of", "and", "to"]
    assert doc["configuration"]["codec"] == "string"
    # Without --codec the reports' own codec decodes them (it travels in every report).
    inferred = run_job([f"--input={tmp_path}/reports/*.avro", f"--output={tmp_path}/hh1",
                        *flags])
    assert inferred["top_k"] == doc["top_k"]
    # Read as integers, every report is a dead letter: codecs never mix.
    doc = run_job([f"--input={tmp_path}/reports/*.avro", f"--output={tmp_path}/hh2",
                   *flags, "--codec", "int"])
    assert doc["top_k"] == [] and doc["dead_letters"]["total"] == len(words)
    assert doc["error"] == "no valid reports"


def test_each_epsilon_is_its_own_result_unless_one_is_expected(tmp_path):
    simulate_pem(tmp_path / "a", users=3000, epsilon=4.0)
    simulate_pem(tmp_path / "b", users=2000, epsilon=2.0, seed=12)
    doc = run_job([f"--input={tmp_path}/[ab]/*.avro", f"--output={tmp_path}/hh",
                             *FLAGS])
    assert [(r["configuration"]["epsilon"], r["n"]) for r in doc["results"]] == [(4.0, 3000),
                                                                              (2.0, 2000)]
    assert doc["configuration"]["epsilon"] == 4.0 and doc["n"] == 3000
    warning, *shortfalls = doc["warnings"]  # several epsilons in one input are flagged
    assert warning.startswith("the input holds 2 PEM configurations (epsilon 2.0, 4.0)")
    assert all(": found " in line and "heavy hitters asked for" in line for line in shortfalls)
    doc = run_job([f"--input={tmp_path}/[ab]/*.avro", f"--output={tmp_path}/hh2",
                             *FLAGS, "--expect_epsilon", "2"])
    assert [(r["configuration"]["epsilon"], r["n"], r["dead_letters"])
            for r in doc["results"]] == [(2.0, 2000, 0), (4.0, 0, 3000)]
    assert doc["dead_letters"]["by_reason"] == {"parameter mismatch: epsilon 4.0, expected 2.0":
                                                3000}


def test_a_group_without_reports_is_an_error_not_a_guess(tmp_path):
    simulate_pem(tmp_path / "reports", users=2000)
    records = [r for r in read_records(f"{tmp_path}/reports/*.avro") if r["pem"]["group"] != 2]
    with open(tmp_path / "gap.avro", "wb") as f:
        formats.write_avro(f, records)
    doc = run_job([f"--input={tmp_path}/gap.avro", f"--output={tmp_path}/hh", *FLAGS])
    assert doc["top_k"] == []
    assert doc["error"] == "pass 2 (prefixes of 24 bits): group 2 had no reports"
    assert [s["error"] for s in doc["passes"]] == [
        None, None, "pass 2 (prefixes of 24 bits) had no reports",
        "pass 3 failed: pass 2 (prefixes of 24 bits) had no reports"]
    assert doc["group_sizes"][2] == 0 and doc["n"] == len(records)


@pytest.mark.parametrize("flags,message", [
    (["--k", "0", "--bits", "32"], "top_k must be >= 1, got 0"),
    (["--k", "8", "--bits", "65"], "value_bits must be in [1, 64], got 65"),
    (["--k", "8", "--bits", "12", "--codec", "string"], "bits of a string codec must be a "
                                                        "multiple of 8, got 12"),
    (["--k", "8", "--bits", "64", "--query_limit", "8"], "query_limit must allow a step"),
    (["--k", "8", "--bits", "64", "--step_bits", "15", "--num_groups", "3"],
     "num_groups must equal ceil((value_bits - start_bits) / step_bits) = ceil(61 / 15) = 5"),
    (["--bits", "64"], "--k and --bits go together"),
    (["--k", "8", "--bits", "32", "--protocol", "spm", "--survivors", "4"],
     "--survivors: spm has no such server option (its options: none)"),
    (["--k", "8", "--bits", "32", "--protocol", "mcm", "--start_bits", "4"],
     "--start_bits is not a parameter of mcm (it is of pem); mcm takes --num_channels "
     "--query_limit --channel_seed"),
    (["--step_bits", "4"], "--step_bits needs --k and --bits"),
    (["--k", "8", "--bits", "32", "--refine_sigma", "high"],
     "--refine_sigma must be a number or off, got 'high'"),
    (["--k", "8", "--bits", "16", "--protocol", "treehist", "--refine_sigma", "3"],
     "--refine_sigma: treehist has no such server option (its options: --survivors "
     "--threshold_sigma --threshold)"),
    (["--k", "8", "--bits", "32", "--protocol", "sfp", "--fragment_bits", "5"],
     "fragment_bits must divide value_bits=32, got 5"),
    (["--k", "8", "--bits", "32", "--survivors", "9", "--query_limit", "1024"],
     "survivors must be <= query_limit // 2**step_bits = 1024 // 2**7 = 8, got 9"),
])
def test_bad_flags_fail_before_the_pipeline(tmp_path, flags, message):
    with pytest.raises(SystemExit) as raised:
        run_job([f"--input={tmp_path}/none/*.avro", f"--output={tmp_path}/o", *flags])
    assert message in str(raised.value)
    assert not (tmp_path / "o").exists()


def test_configuration_comes_from_the_input_and_truth_gives_scores(tmp_path):
    truth = simulate.run(["--oracle", "pem", "--bits", "32", "--k", "8", "--epsilon", "4",
                          "--domain_size", "500", "--users", "20000", "--seed", "5",
                          "--output", str(tmp_path / "auto"), "--shards", "2"])
    assert truth["parameters"] == hh.configure(top_k=8, value_bits=32, epsilon=4.0,
                                               users=20_000).parameters
    doc = run_job([f"--input={tmp_path}/auto/*.avro", f"--output={tmp_path}/hh",
                   f"--truth={tmp_path}/auto/truth.json"])
    assert doc["dead_letters"]["total"] == 0 and doc["n"] == 20_000
    assert {k: v for k, v in doc["configuration"].items() if k != "codec"} == \
        truth["parameters"]
    expected = hh.score_top_k([t["value"] for t in doc["top_k"]], truth["top"], 8)
    assert doc["scores"] == doc["results"][0]["scores"] == expected
    assert doc["scores"]["f1"] == 1.0  # Zipf(1.1) over 500 values, 20000 users, epsilon 4
    summary = doc["run"]  # from the run's counters, not read back from the output
    assert summary["records"] == summary["reports"] == 20_000
    assert summary["candidates"] == sum(s["candidates"] for s in doc["passes"])
    assert summary["survivors"] == sum(s["survivors"] for s in doc["passes"])


def test_an_input_that_matches_nothing_fails_before_the_pipeline(tmp_path):
    with pytest.raises(SystemExit, match="matched no files"):
        run_job([f"--input={tmp_path}/none/*.avro", f"--output={tmp_path}/o", *FLAGS])
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_two_worker_processes_give_the_same_answer(tmp_path):
    simulate_pem(tmp_path / "reports", users=6000)
    args = [f"--input={tmp_path}/reports/*.avro", *FLAGS]
    one = run_job([*args, f"--output={tmp_path}/one"])
    two = run_job([*args, f"--output={tmp_path}/two", "--direct_num_workers=2",
                             "--direct_running_mode=multi_processing"])
    assert two["top_k"] == one["top_k"] and two["group_sizes"] == one["group_sizes"]


#: A configuration per protocol that finds Zipf(1.1)'s clear heavy hitters over 300
#: values from 20 000 users at epsilon 4 (small enough to run in seconds).
PROTOCOL_FLAGS = {
    "pem": FLAGS,
    "spm": ["--bits", "16", "--k", "8"],
    "mcm": ["--bits", "16", "--k", "8"],
    "treehist": ["--bits", "16", "--k", "8", "--step_bits", "8"],
    "sfp": ["--bits", "16", "--k", "8", "--fragment_bits", "8", "--hash_bits", "4"],
}


@pytest.mark.parametrize("name", sorted(PROTOCOL_FLAGS))
def test_every_protocol_runs_from_simulate_through_the_job_as_in_core(tmp_path, name):
    flags = PROTOCOL_FLAGS[name]
    truth = simulate.run(["--oracle", name, *flags, "--epsilon", "4", "--domain_size", "300",
                          "--users", "20000", "--seed", "3", "--output", str(tmp_path / "r"),
                          "--shards", "2"])
    assert truth["oracle"] == name and sum(truth["group_sizes"]) == 20_000
    # the configuration from the input, then the same from the flags
    doc = run_job([f"--input={tmp_path}/r/*.avro", f"--output={tmp_path}/hh",
                   f"--protocol={name}", f"--truth={tmp_path}/r/truth.json"])
    flagged = run_job([f"--input={tmp_path}/r/*.avro", f"--output={tmp_path}/hh2",
                       f"--protocol={name}", *flags, "--expect_epsilon", "4"])
    assert flagged["top_k"] == doc["top_k"] and doc["error"] is None
    batches, dead = parse_records(read_records(f"{tmp_path}/r/*.avro"), trusted=True,
                                  expect={"oracle": name})
    assert not dead
    ((key, batch),) = batches.items()
    protocol = key.protocol
    assert protocol.parameters == truth["parameters"]
    expected = protocol.identify(batch.reports)
    assert [t["value"] for t in doc["top_k"]] == expected.values.tolist()
    assert [t["frequency"] for t in doc["top_k"]] == expected.frequencies.tolist()
    assert doc["group_sizes"] == list(expected.group_sizes) == truth["group_sizes"]
    assert len(doc["passes"]) == protocol.num_passes
    assert doc["n"] == doc["records"] == 20_000 and doc["dead_letters"]["total"] == 0
    found = [t["value"] for t in doc["top_k"]]
    assert doc["scores"] == hh.score_top_k(found, truth["top"], 8)
    assert truth["top"][0]["value"] in found  # the most frequent value (about 20%) is found


def test_reports_of_another_protocol_are_dead_letters_of_the_job(tmp_path):
    simulate_pem(tmp_path / "reports", users=1000)
    doc = run_job([f"--input={tmp_path}/reports/*.avro", f"--output={tmp_path}/hh",
                   "--protocol=treehist", "--k", "8", "--bits", "32"])
    assert doc["n"] == 0 and doc["dead_letters"]["total"] == 1000
    assert doc["error"] == "no valid reports"


def test_reports_to_records_keeps_the_group_of_each_user_id(tmp_path):
    """Each simulated user lands in exactly one group: the one its id hashes to."""
    simulate_pem(tmp_path / "reports", users=4000)
    records = read_records(f"{tmp_path}/reports/*.avro")
    pem, _ = core_identify(records)
    groups = pem.group_of(np.array([r["user_id"] for r in records]))
    assert groups.tolist() == [r["pem"]["group"] for r in records]
    assert len({r["user_id"] for r in records}) == 4000
    one = reports_to_records(pem, pem.perturb([1], ["user-0"], np.random.default_rng(0)),
                             ["r"], ["user-0"], [0])[0]
    assert one["pem"]["group"] == int(pem.group_of(["user-0"])[0])


def test_repeated_reports_are_identified_once_and_counted(tmp_path):
    simulate_pem(tmp_path / "reports", users=3000)
    first = sorted((tmp_path / "reports").glob("*.avro"))[0]
    once = run_job([f"--input={tmp_path}/reports/*.avro",
                              f"--output={tmp_path}/once", *FLAGS])
    (tmp_path / "reports" / "again.avro").write_bytes(first.read_bytes())
    twice = run_job([f"--input={tmp_path}/reports/*.avro",
                               f"--output={tmp_path}/twice", *FLAGS])
    assert twice["duplicates"] == 1000 and once["duplicates"] == 0
    assert twice["top_k"] == once["top_k"] and twice["n"] == once["n"] == 3000
    assert twice["records"] == 4000 == twice["reports"] + twice["duplicates"]


def test_the_job_has_one_flag_per_protocol_parameter_naming_its_protocols():
    from ldpflow.core.registry import HEAVY_HITTER, protocol_flags
    from ldpflow.pipelines.options import protocol_flag_specs

    flags = protocol_flags(HEAVY_HITTER)
    assert {flag.name for flag in flags} == hh.SHAPE_FLAGS
    for flag in flags:
        assert set(flag.protocols) == {
            name for name in hh.PROTOCOLS if flag.name in hh.shape_parameters(name)}, flag
    specs = protocol_flag_specs()  # what every command's help shows
    assert set(specs.heavy_hitters) == set(hh.PROTOCOLS)
    assert {f.name: f.help for f in specs.flags} == {f.name: f.text for f in flags}


# -- the default engine (--engine auto: local without Beam's flags) ----------------------------
@pytest.mark.parametrize("name", ["pem", "sfp"])
def test_the_default_run_writes_the_bytes_of_the_beam_run(tmp_path, monkeypatch, engine_lines,
                                                         name):
    """No --engine and no Beam flag: the job plan in this process (one log line says so),
    whose heavy_hitters.json and dead letters are the Beam job's byte for byte, but for
    ``elapsed_seconds``; the run's id-hash key is fixed so that ``batches`` are too."""
    from tests.plan.test_heavy_hitter_engines import _outputs, write_inputs

    monkeypatch.setattr("ldpflow.core.dedup.new_id_key", lambda: bytes(range(16)))
    (tmp_path / "in").mkdir()
    files = write_inputs(tmp_path / "in", name)
    argv = [f"--input={files}", f"--protocol={name}", "--quiet"]
    default = heavy_hitters.run([*argv, f"--output={tmp_path}/default"])
    assert engine_lines() == ["ldpflow heavy-hitters: engine local (--engine auto: no Beam "
                              "flag, runner or remote path given; the job plan in this process)"]
    beam = heavy_hitters.run([*argv, f"--output={tmp_path}/beam", "--engine=beam"])
    document, letters = _outputs(tmp_path / "default")
    assert (document, letters) == _outputs(tmp_path / "beam") and len(letters) == 2
    for field in ("records", "reports", "duplicates", "dead_letters"):
        assert default[field] == beam[field], field
