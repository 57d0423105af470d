"""``ldpflow heavy-hitters --poisoning detect``: each PEM pass's dispersion test from the
counts the job aggregates, equal to the core defence on the same reports; an attacked
input raises the alarm and an honest one does not (fixed seeds, at the core's levels)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from ldpflow.core import codecs, poisoning, simulation
from ldpflow.core.heavy_hitters import PrefixExtendingMethod
from ldpflow.core.oracles import Reports
from ldpflow.pipelines import heavy_hitters
from tests import wire_support as formats
from tests.wire_support import parse_records, pem_from_key, reports_to_records

pytestmark = pytest.mark.pipeline

USERS, BETA, SEED = 20_000, 0.1, 1
# 10-bit values, three passes (prefixes of 6, 8 and 10 bits), epsilon 1: the benchmark's PEM.
PEM = PrefixExtendingMethod(top_k=16, value_bits=10, epsilon=1.0, step_bits=2)


def pem_reports(beta: float, seed: int = SEED) -> tuple[Reports, list[str], np.ndarray]:
    """Genuine Zipf(1.1) users, and with ``beta > 0`` fakes running each pass's MGA on ten
    rare targets' prefixes (as ``benchmarks/poisoning.py``'s ``pem-mga-10-targets``)."""
    rng = np.random.default_rng(seed)
    d = 1 << PEM.value_bits
    values = simulation.RankDistribution("zipf", 1.1).sample(d, USERS, rng)
    fakes = poisoning.fake_user_count(USERS, beta) if beta else 0
    ids = [f"user-{i}" for i in range(USERS + fakes)]
    genuine = PEM.perturb(values, ids[:USERS], rng)
    targets = np.sort(rng.choice(np.arange(100, d), 10, replace=False))
    if not fakes:
        return genuine, ids, targets
    groups = PEM.group_of(ids[USERS:])
    columns = {"seed": np.zeros(fakes, np.uint64), "bucket": np.zeros(fakes, np.int64),
               "group": groups.astype(np.int64),
               "prefix_bits": np.asarray(PEM.prefix_bits, np.int64)[groups]}
    for pass_index, bits in enumerate(PEM.prefix_bits):
        rows = np.flatnonzero(groups == pass_index)
        prefixes = np.unique(targets >> (PEM.value_bits - bits))
        fake = poisoning.maximal_gain_attack(PEM.oracle(pass_index), prefixes, rows.size, rng)
        columns["seed"][rows], columns["bucket"][rows] = fake.seed, fake.bucket
    return Reports.concat([genuine, Reports(PEM.name, columns)]), ids, targets


def write_input(path, reports, ids):
    records = reports_to_records(PEM, reports, [f"r-{u}" for u in ids], ids,
                                 [0] * len(ids))
    with open(path, "wb") as f:
        formats.write_avro(f, records)
    return records


def core_section(records):
    """The core defence on the reports as the job parses them (its key, its protocol)."""
    batches, dead = parse_records(records, trusted=True, expect={"oracle": "pem"})
    assert not dead
    ((key, batch),) = batches.items()
    pem, codec = pem_from_key(key)
    valid = codecs.make_codec(codec, bits=pem.value_bits).valid_prefixes  # the job prunes
    return poisoning.defend_prefixes(pem, batch.reports, valid=valid)


def run_job(tmp_path, name, records_path, *extra):
    output = tmp_path / name
    summary = heavy_hitters.run(["--engine=beam", f"--input={records_path}", f"--output={output}",
                                 *extra])
    with open(output / "heavy_hitters.json") as f:
        return json.load(f), summary


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("poisoning")
    out = {}
    for label, beta in (("honest", 0.0), ("attacked", BETA)):
        reports, ids, targets = pem_reports(beta)
        path = tmp_path / f"{label}.avro"
        records = write_input(path, reports, ids)
        doc, summary = run_job(tmp_path, label, path, "--poisoning=detect")
        out[label] = {"doc": doc, "summary": summary, "core": core_section(records),
                      "path": path, "targets": targets, "tmp": tmp_path}
    return out


@pytest.mark.parametrize("label", ["honest", "attacked"])
def test_the_job_section_equals_the_core_defence_exactly(runs, label):
    run = runs[label]
    (result,) = run["doc"]["results"]
    # through JSON, as the document stores it (floats round-trip exactly)
    assert result["poisoning"] == json.loads(json.dumps(run["core"]))
    assert result["poisoning"]["n"] == result["n"] == sum(result["group_sizes"])


def test_an_attacked_input_raises_the_alarm_at_every_stage(runs):
    section = runs["attacked"]["doc"]["results"][0]["poisoning"]
    pass_level = section["details"]["pass_level"]
    assert pass_level == poisoning.DEFAULT_POPULATION_LEVEL / PEM.num_groups
    assert section["alarm"] is True
    assert section["details"]["alarm_passes"] == [0, 1, 2]
    for entry in section["details"]["passes"]:
        test = entry["dispersion"]
        assert test["level"] == pass_level / 2  # the statistic's share of the pass's level
        assert test["p_value"] <= test["level"] and test["value"] > test["threshold"]
    # The same layout as ldpflow estimate's section; no report is flagged from counts.
    assert set(section) >= {"test", "level", "population_level", "n", "flagged",
                            "flagged_fraction", "suspected", "identifiable",
                            "recovered_estimates", "details"}
    assert section["flagged"] == 0 and section["suspected"] == []
    # the attack works: most targets are among the top 16 (detection changes no result)
    found = {t["value"] for t in runs["attacked"]["doc"]["top_k"]}
    assert len(found & set(runs["attacked"]["targets"].tolist())) >= 8


def test_an_honest_input_raises_no_alarm(runs):
    section = runs["honest"]["doc"]["results"][0]["poisoning"]
    assert section["alarm"] is False and section["details"]["alarm_passes"] == []
    for entry in section["details"]["passes"]:
        test = entry["dispersion"]
        assert test["p_value"] > test["level"] and not test["alarm"]
    assert [s["candidates"] for s in section["details"]["passes"]] == [
        s["candidates"] for s in runs["honest"]["doc"]["passes"]]


def test_the_alarms_are_counted_in_the_summary_and_the_log(runs):
    assert runs["attacked"]["summary"]["poisoning_alarms"] == 3
    assert runs["honest"]["summary"]["poisoning_alarms"] == 0


def test_without_the_flag_there_is_no_section_and_the_same_result(runs, caplog):
    run = runs["attacked"]
    with caplog.at_level(logging.INFO, logger="ldpflow.pipelines.heavy_hitters"):
        doc, summary = run_job(run["tmp"], "plain", run["path"])
    assert "poisoning" not in doc["results"][0] and "poisoning_alarms" not in summary
    assert doc["top_k"] == run["doc"]["top_k"] and doc["passes"] == run["doc"]["passes"]
    assert not any("poisoning: " in r.getMessage() for r in caplog.records)


def test_detect_logs_the_alarm_count(runs, caplog):
    run = runs["attacked"]
    with caplog.at_level(logging.INFO, logger="ldpflow.pipelines.heavy_hitters"):
        run_job(run["tmp"], "logged", run["path"], "--poisoning=detect")
    assert any("poisoning: 3 of 3 passes tested raised the alarm" in r.getMessage()
               for r in caplog.records)


def test_another_protocol_says_it_has_no_defence(tmp_path, caplog):
    from ldpflow.pipelines import simulate

    simulate.run(["--oracle", "treehist", "--bits", "16", "--k", "4", "--epsilon", "4",
                  "--domain_size", "100", "--users", "2000", "--seed", "3",
                  "--output", str(tmp_path / "th")])
    with caplog.at_level(logging.WARNING, logger="ldpflow.pipelines.heavy_hitters"):
        doc, _ = run_job(tmp_path, "hh", f"{tmp_path}/th/*.avro", "--protocol=treehist",
                         "--poisoning=detect")
    (result,) = doc["results"]
    assert result["poisoning"] == {
        "error": "no poisoning defence for heavy-hitter protocol 'treehist'; it covers pem"}
    assert any("no poisoning defence for treehist" in r.getMessage() for r in caplog.records)
