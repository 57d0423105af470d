"""``ldpflow estimate --value_labels FILE --format csv``: labelled, reproducible outputs."""

from __future__ import annotations

import csv
import io
import json

import pytest

from ldpflow.pipelines import cli, estimate, simulate

pytestmark = pytest.mark.pipeline

LABELS = 'value,label\n0,"red, bright"\n1,"say ""hi"""\n2,"two\nlines"\n5,café\n'


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("labels")
    simulate.run(["--oracle", "olh", "--epsilon", "2", "--domain_size", "16", "--users", "4000",
                  "--seed", "4", "--output", str(root / "reports"), "--shards", "1"])
    (root / "labels.csv").write_text(LABELS, encoding="utf-8")
    return root


def _run(root, name, *extra):
    estimate.run(["--engine=beam", f"--input={root}/reports/*.avro", f"--output={root}/{name}",
                  "--methods=base,norm-sub", f"--value_labels={root}/labels.csv",
                  "--format=csv", *extra])
    return root / name


def test_labelled_csv_is_byte_identical_across_runs_and_engines(reports):
    first = _run(reports, "a")
    again = _run(reports, "b")
    local = _run(reports, "c", "--engine=local")
    data = (first / "estimates.csv").read_bytes()
    assert data == (again / "estimates.csv").read_bytes() == (local / "estimates.csv").read_bytes()
    assert (first / "estimates.avro").read_bytes() == (local / "estimates.avro").read_bytes()
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"), newline="")))
    assert len(rows) == 16 * 2
    assert {r["label"] for r in rows if r["value"] == "2"} == {"two\nlines"}
    document = json.loads((first / "estimates.json").read_text(encoding="utf-8"))
    block = document["run"]["value_labels"]
    assert block["count"] == 4 and block["version"].startswith("blake2b-128:")
    assert document["run"]["formats"] == ["json", "csv"]
    manifest = json.loads((first / ".ldpflow-manifest.json").read_text())["files"]
    assert "estimates.csv" in manifest


@pytest.mark.parametrize("content,extra,message", [
    ("0,a\n0,b\n", [], "value 0 is labelled twice"),
    ("0,a\n9,b\n", ["--expect_domain_size=8"], r"value 9 is outside [0, 8)"),
    ("0,a\n1,\n", [], "the label of value 1 is empty"),
    (None, [], "not UTF-8"),
    ("0,a\n", ["--format=xml"], "argument --format: invalid choice: 'xml'"),
    ("0,a\n", ["--expect_value_labels=blake2b-128:00"], "but the clients encoded with "
                                                        "blake2b-128:00"),
])
def test_a_bad_label_file_or_format_is_a_usage_error(reports, tmp_path, capsys, content, extra,
                                                     message):
    path = tmp_path / "bad.csv"
    if content is None:
        path.write_bytes(b"0,caf\xe9\n")
    else:
        path.write_text(content, encoding="utf-8")
    code = cli.main(["estimate", "--engine=beam", f"--input={reports}/reports/*.avro",
                     f"--output={tmp_path}/out", f"--value_labels={path}", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and message in err[-1], err
    assert not (tmp_path / "out" / "estimates.json").exists()


def test_simulate_draws_values_by_label_and_estimate_names_them_back(tmp_path, capsys):
    (tmp_path / "labels.csv").write_text(LABELS, encoding="utf-8")
    # one label per line; "café" written decomposed (NFD) finds the NFC label
    lines = ["red, bright"] * 300 + ["cafe\u0301"] * 200 + ['say "hi"'] * 100
    (tmp_path / "values.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    truth = simulate.run(["--oracle", "grr", "--epsilon", "4", "--domain_size", "8",
                          "--values_file", str(tmp_path / "values.txt"), "--value_labels",
                          str(tmp_path / "labels.csv"), "--output", str(tmp_path / "r"),
                          "--shards", "1"])
    assert truth["counts"][:6] == [300, 100, 0, 0, 0, 200]
    estimate.run(["--engine=beam", f"--input={tmp_path}/r/*.avro", f"--output={tmp_path}/est",
                  "--methods=base", f"--value_labels={tmp_path}/labels.csv",
                  f"--expect_value_labels={truth['value_labels']}"])
    document = json.loads((tmp_path / "est" / "estimates.json").read_text(encoding="utf-8"))
    assert [e["label"] for e in document["results"][0]["top"][:2]] == ["red, bright", "café"]
    (tmp_path / "values.txt").write_text("red, bright\nblue\n", encoding="utf-8")
    assert cli.main(["simulate", "--oracle", "grr", "--epsilon", "4", "--domain_size", "8",
                     "--values_file", str(tmp_path / "values.txt"), "--value_labels",
                     str(tmp_path / "labels.csv"), "--output", str(tmp_path / "r2")]) == 2
    assert "line 2: 'blue' is not a label" in capsys.readouterr().err


def test_the_format_flag_offers_the_writers_formats():
    from ldpflow.pipelines import options
    from ldpflow.wire.results import FORMATS

    flag = {f.name: f for f in options.LABELS.flags}["format"]
    assert tuple(flag.choices) == FORMATS
