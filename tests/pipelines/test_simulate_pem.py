"""``ldpflow simulate --oracle pem``: seeded values from N distinct B-bit values, PEM report
files that parse without dead letters, and ``truth.json``."""

from __future__ import annotations

import glob
import json

import fastavro
import numpy as np
import pytest

from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines import simulate
from tests import wire_support as formats
from tests.wire_support import parse_records, pem_from_key

BASE = ["--oracle", "pem", "--bits", "64", "--k", "16", "--epsilon", "2"]


def run(tmp_path, *extra, name="out"):
    out = tmp_path / name
    return out, simulate.run([*BASE, "--output", str(out), *extra])


def records_of(out, suffix="avro"):
    paths = sorted(glob.glob(f"{out}/*.{suffix}"))
    if suffix == "avro":
        return [r for p in paths for r in fastavro.reader(open(p, "rb"))]
    return [formats.from_json_record(json.loads(line)) for p in paths for line in open(p)]


def test_truth_lists_the_most_frequent_values_and_the_configuration(tmp_path):
    out, truth = run(tmp_path, "--domain_size", "3000", "--users", "20000", "--seed", "4",
                     "--shards", "3")
    top = truth["top"]
    assert len(top) == 1000 <= truth["distinct"] <= 3000
    counts = [t["count"] for t in top]
    assert counts == sorted(counts, reverse=True) and sum(counts) <= 20000
    assert all(type(t["value"]) is int and 0 <= t["value"] < 2**64 for t in top)
    # No shape flag: the automatic configuration of the users, epsilon, k and m.
    auto = hh.configure(top_k=16, value_bits=64, epsilon=2.0, users=20000)
    assert truth["parameters"] == auto.parameters
    assert truth["prefix_bits"] == list(auto.prefix_bits) and truth["codec"] == "int"
    assert sum(truth["group_sizes"]) == truth["users"] == 20000
    assert len(glob.glob(f"{out}/reports-*-of-00003.avro")) == 3
    # The reports parse without dead letters; each user reports once, in its id's group.
    records = records_of(out)
    batches, dead = parse_records(records, trusted=True, expect={"oracle": "pem"})
    assert not dead
    ((key, batch),) = batches.items()
    pem, codec = pem_from_key(key)
    assert codec == "int" and pem.parameters == truth["parameters"]
    assert len(set(batch.user_ids.tolist())) == 20000
    np.testing.assert_array_equal(pem.group_of(batch.user_ids), batch.reports.group)
    assert np.bincount(batch.reports.group).tolist() == truth["group_sizes"]
    # The values follow the seeded rank map of the core helper.
    values = hh.sample_values(20000, num_distinct=3000, value_bits=64,
                              rng=np.random.default_rng(4), exponent=1.1)
    assert hh.true_top(values, 1000) == top


def test_simulation_is_reproducible_from_its_seed(tmp_path):
    flags = ["--domain_size", "50", "--users", "500", "--seed", "9", "--format", "json"]
    out_a, a = run(tmp_path, *flags, name="a")
    out_b, b = run(tmp_path, *flags, name="b")
    assert a == b
    assert records_of(out_a, "jsonl") == records_of(out_b, "jsonl")
    _, c = run(tmp_path, *flags[:-4], "--seed", "10", name="c")
    assert c["top"] != a["top"]


def test_values_file_of_integers_and_of_strings(tmp_path):
    ints = tmp_path / "ints.txt"
    ints.write_text("5\n5\n18446744073709551615\n\n7\n")
    _, truth = run(tmp_path, "--values_file", str(ints), name="i")
    assert truth["top"] == [{"value": 5, "count": 2}, {"value": 7, "count": 1},
                            {"value": 2**64 - 1, "count": 1}]
    words = tmp_path / "words.txt"
    words.write_text("b\u00e9b\u00e9\ncat\ncat\nb\u00e9b\u00e9\ncat\n", encoding="utf-8")
    out, truth = run(tmp_path, "--values_file", str(words), "--codec", "string", name="s")
    assert truth["top"] == [{"value": "cat", "count": 3}, {"value": "b\u00e9b\u00e9", "count": 2}]
    assert {r["pem"]["codec"] for r in records_of(out)} == {"string"}
    long_words = tmp_path / "long.txt"
    long_words.write_text("abcdefghij\nabcdefghXY\n")
    _, truth = run(tmp_path, "--values_file", str(long_words), "--codec", "string",
                   "--truncate", name="t")
    assert truth["top"] == [{"value": "abcdefgh", "count": 2}]


def test_codec_and_width_are_chosen_from_the_values_file(tmp_path):
    words = tmp_path / "words.txt"
    # 99 of 100 values hold at most 3 bytes; one of 11 bytes is truncated to 3.
    words.write_text("the\n" * 60 + "of\n" * 39 + "abcdefghijk\n", encoding="utf-8")
    out = tmp_path / "w"
    truth = simulate.run(["--oracle", "pem", "--k", "2", "--epsilon", "4", "--values_file",
                          str(words), "--seed", "1", "--output", str(out), "--shards", "1"])
    assert truth["codec"] == "string" and truth["parameters"]["value_bits"] == 24
    assert truth["truncated"] == 1
    assert truth["top"][:3] == [{"value": "the", "count": 60}, {"value": "of", "count": 39},
                                {"value": "abc", "count": 1}]
    assert {r["pem"]["codec"] for r in records_of(out)} == {"string"}
    ints = tmp_path / "ints.txt"
    ints.write_text("5\n300\n5\n")
    truth = simulate.run(["--oracle", "pem", "--k", "1", "--epsilon", "4", "--values_file",
                          str(ints), "--output", str(tmp_path / "i"), "--shards", "1"])
    assert truth["codec"] == "int" and truth["parameters"]["value_bits"] == 9  # 300 < 2**9


@pytest.mark.parametrize("extra,message", [
    (["--values_file", "{big}"], "--values_file: values must lie in [0, 2**64), got "
                                 "18446744073709551616 at position 1"),
    (["--values_file", "{long}", "--codec", "string"], "strings must hold at most 8 UTF-8 bytes"),
    (["--codec", "string", "--users", "5", "--domain_size", "5"],
     "--codec string needs --values_file"),
    (["--users", "5"], "--oracle pem needs --users and --domain_size"),
    (["--users", "5", "--domain_size", "5", "--query_limit", "16"],
     "query_limit must allow a step of at least one bit"),
])
def test_bad_pem_flags_are_refused_with_the_reason(tmp_path, capsys, extra, message):
    (tmp_path / "big.txt").write_text("1\n18446744073709551616\n")
    (tmp_path / "long.txt").write_text("a\nninebytes\n")
    extra = [e.format(big=tmp_path / "big.txt", long=tmp_path / "long.txt") for e in extra]
    with pytest.raises(SystemExit) as excinfo:
        run(tmp_path, *extra)
    assert message in excinfo.value.code


def test_pem_flags_need_the_pem_oracle(tmp_path, capsys):
    with pytest.raises(SystemExit) as excinfo:
        simulate.run(["--oracle", "olh", "--epsilon", "1", "--domain_size", "8", "--users", "5",
                      "--bits", "8", "--output", str(tmp_path)])
    assert "--bits apply to the heavy-hitter protocols only" in excinfo.value.code
    with pytest.raises(SystemExit) as excinfo:
        simulate.run(["--oracle", "olh", "--epsilon", "1", "--users", "5",
                      "--output", str(tmp_path)])
    assert "--domain_size is required for --oracle olh" in excinfo.value.code
    with pytest.raises(SystemExit) as excinfo:
        simulate.run([*BASE[:2], "--k", "4", "--epsilon", "1", "--output", str(tmp_path)])
    assert "--oracle pem needs --bits" in excinfo.value.code


def test_pem_reports_round_trip_through_parquet(tmp_path):
    from ldpflow.pipelines import heavy_hitters

    out = tmp_path / "pq"
    simulate.run(["--oracle", "pem", "--bits", "16", "--k", "4", "--epsilon", "4",
                  "--domain_size", "50", "--users", "4000", "--seed", "3",
                  "--output", str(out), "--format", "parquet", "--shards", "2"])
    assert sorted(p.name for p in out.iterdir())[:2] == ["reports-00000-of-00002.parquet",
                                                          "reports-00001-of-00002.parquet"]
    heavy_hitters.run(["--engine=beam", f"--input={out}/*.parquet", f"--output={tmp_path}/hh"])
    doc = json.loads((tmp_path / "hh" / "heavy_hitters.json").read_text())
    assert doc["dead_letters"]["total"] == 0
    assert doc["n"] == doc["records"] == 4000
    truth = json.loads((out / "truth.json").read_text())["top"]
    assert doc["top_k"][0]["value"] == truth[0]["value"]
