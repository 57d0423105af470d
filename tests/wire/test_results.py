"""``estimate_result``: each post-processed estimate carries its own intervals."""

from __future__ import annotations

import json

import numpy as np

import ldpflow
from ldpflow.core import intervals, postprocess
from ldpflow.core.simulation import parse_distribution
from ldpflow.wire.results import estimate_result


def _accumulator(name: str = "olh", d: int = 64, n: int = 20_000):
    oracle = ldpflow.oracle(name, epsilon=1.0, domain_size=d)
    rng = np.random.default_rng(11)
    values = parse_distribution("zipf:1.1").sample(d, n, rng)
    return oracle, oracle.aggregate(oracle.perturb(values, rng=rng))


def test_results_carry_each_methods_bootstrap_intervals_reproducibly():
    oracle, acc = _accumulator()
    methods = ["base", "norm-sub", "base-cut", "power-ns", "norm-mul"]
    result = estimate_result(oracle.key, acc, 0, methods, postprocess.postprocess)
    assert set(result["method_intervals"]) == {"norm-sub", "base-cut"}
    assert set(result["method_intervals_missing"]) == {"power-ns", "norm-mul"}
    expected = intervals.bootstrap_intervals(oracle.estimate(acc), "norm-sub")
    own = result["method_intervals"]["norm-sub"]
    assert own["low"] == expected.low.tolist() and own["high"] == expected.high.tolist()
    assert own["replicates"] == 1000 and own["seed"] == expected.seed
    assert own["confidence"] == 0.95 and len(own["standard_errors"]) == 64
    for method, bounds in result["method_intervals"].items():
        f = result["estimates"][method]
        assert all(lo <= x <= hi for lo, x, hi in zip(bounds["low"], f, bounds["high"],
                                                       strict=True))
    # The old fields stay as they were: the raw estimate's.
    assert result["intervals"]["applies_to"] == "base"
    again = estimate_result(oracle.key, acc, 0, methods, postprocess.postprocess)
    assert json.dumps(again) == json.dumps(result)  # seeded from the data: same bytes


def test_a_method_that_cannot_apply_has_no_intervals_either():
    oracle, acc = _accumulator("onebit")
    result = estimate_result(oracle.key, acc, 0, ["base", "ibu", "norm-sub"],
                             postprocess.postprocess)
    assert "ibu" in result["method_errors"] and "ibu" not in result["method_intervals"]
    assert set(result["method_intervals"]) == {"norm-sub"}


def _labelled_document(tmp_path=None):
    from ldpflow.wire.labels import ValueLabels
    from ldpflow.wire.results import estimates_document, run_metadata

    oracle, acc = _accumulator(d=16, n=5000)
    result = estimate_result(oracle.key, acc, 0, ["base", "norm-sub", "power-ns"],
                             postprocess.postprocess, top_k=4)
    labels = ValueLabels({0: "red, bright", 1: 'say "hi"', 2: "two\nlines", 5: "café"}, "l")
    run = run_metadata(inputs="in/*", files=1, runner="test", policy=None,
                       methods=["base", "norm-sub", "power-ns"], started="2026-01-01T00:00:00Z",
                       value_labels=labels, formats=("csv",))
    return estimates_document([result], {"total": 0, "by_reason": {}}, True, run=run), run


def test_estimates_csv_has_a_row_per_value_and_method_quoted_and_reproducible():
    import csv
    import io

    from ldpflow.wire.results import CSV_COLUMNS, estimates_csv

    document, _ = _labelled_document()
    data = estimates_csv(document)
    assert data == estimates_csv(json.loads(json.dumps(document)))  # same bytes
    rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
    assert tuple(rows[0]) == CSV_COLUMNS
    (result,) = document["results"]
    body = [dict(zip(CSV_COLUMNS, row, strict=True)) for row in rows[1:]]
    assert len(body) == 16 * 3
    by = {(int(r["value"]), r["method"]): r for r in body}
    assert by[2, "base"]["label"] == "two\nlines" and by[0, "norm-sub"]["label"] == "red, bright"
    assert by[1, "base"]["label"] == 'say "hi"' and by[3, "base"]["label"] == ""
    for v in range(16):
        base = by[v, "base"]
        assert float(base["estimate"]) == result["estimates"]["base"][v]  # exact round trip
        assert float(base["standard_error"]) == result["standard_errors"][v]
        assert float(base["low"]) == result["intervals"]["low"][v]
        assert base["interval"] == "normal"
        own = result["method_intervals"]["norm-sub"]
        assert float(by[v, "norm-sub"]["high"]) == own["high"][v]
        assert by[v, "norm-sub"]["interval"] == "bootstrap"
        assert by[v, "power-ns"]["low"] == "" and by[v, "power-ns"]["interval"] == ""


def test_labels_reach_the_top_entries_and_the_avro_records():
    import io

    import fastavro

    from ldpflow.plan.outputs import estimates_files

    document, run = _labelled_document()
    top = {entry["value"]: entry.get("label") for entry in document["results"][0]["top"]}
    assert top[0] == "red, bright" and all(top[v] is None for v in top if v not in (0, 1, 2, 5))
    files = estimates_files(document, run)
    assert set(files) == {"estimates.json", "estimates.avro", "estimates.csv"}
    records = list(fastavro.reader(io.BytesIO(files["estimates.avro"])))
    assert {r["value_labels_version"] for r in records} == {run["value_labels"]["version"]}
    assert records[0]["value_labels"] == {"0": "red, bright", "1": 'say "hi"',
                                          "2": "two\nlines", "5": "café"}


def test_a_run_without_csv_removes_the_previous_runs_csv(tmp_path):
    from ldpflow.plan import outputs as plan_outputs

    document, run = _labelled_document()
    out = tmp_path / "out"
    for formats_run, expect_csv in ((run, True), ({**run, "formats": None}, False)):
        staging = plan_outputs.staging_folder(str(out))
        for name, data in plan_outputs.estimates_files(document, formats_run).items():
            plan_outputs.write_staged(staging, name, data)
        plan_outputs.commit_outputs(str(out), staging)
        assert (out / "estimates.csv").exists() == expect_csv
        listed = json.loads((out / ".ldpflow-manifest.json").read_text())["files"]
        assert ("estimates.csv" in listed) == expect_csv
    # a file of the same name that ldpflow did not write (no manifest entry) is left alone
    (out / "estimates.csv").write_text("mine")
    staging = plan_outputs.staging_folder(str(out))
    for name, data in plan_outputs.estimates_files(document, {**run, "formats": None}).items():
        plan_outputs.write_staged(staging, name, data)
    plan_outputs.commit_outputs(str(out), staging)
    assert (out / "estimates.csv").read_text() == "mine"


def test_estimates_csv_is_what_the_csv_module_writes_row_by_row():
    """The per-column formatting quotes exactly as :mod:`csv` does (``\\r``, leading
    spaces, quotes, commas), so any CSV reader reads the labels back."""
    import csv
    import io

    from ldpflow.wire.labels import ValueLabels
    from ldpflow.wire.results import CSV_COLUMNS, estimates_csv, run_metadata

    document, _ = _labelled_document()
    hostile = ValueLabels({0: "a,b", 1: 'q"x', 2: "l\nn", 3: " sp ", 4: "x\ry", 5: "é\t"})
    document["run"] = run_metadata(inputs="x", files=1, runner="t", policy=None,
                                   methods=["base"], started="", value_labels=hostile)
    expected = io.StringIO(newline="")
    writer = csv.writer(expected, lineterminator="\r\n")
    writer.writerow(CSV_COLUMNS)
    (result,) = document["results"]
    key = [result["oracle"], repr(float(result["epsilon"])), result["domain_size"],
           json.dumps(result["parameters"], sort_keys=True, separators=(",", ":"))]
    bounds = {"base": (result["standard_errors"], result["intervals"]["low"],
                       result["intervals"]["high"], "normal"),
              "norm-sub": (*(result["method_intervals"]["norm-sub"][k]
                             for k in ("standard_errors", "low", "high")), "bootstrap")}
    for v in range(16):
        for method, freqs in result["estimates"].items():
            b = bounds.get(method)
            writer.writerow([*key, v, hostile.get(v) or "", method, repr(float(freqs[v])),
                             *([repr(float(b[0][v])), repr(float(b[1][v])),
                                repr(float(b[2][v])), b[3]] if b else ["", "", "", ""])])
    assert estimates_csv(document) == expected.getvalue().encode("utf-8")
