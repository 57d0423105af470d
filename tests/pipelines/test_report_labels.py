"""``ldpflow report`` with value labels: shown whole and escaped, checked against the
estimates' own dictionary."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import ldpflow
from ldpflow.core import postprocess
from ldpflow.pipelines import cli, report
from ldpflow.wire.labels import LabelsError, ValueLabels
from ldpflow.wire.results import estimate_result, estimates_document, run_metadata

HOSTILE = '<script>alert("x")</script>'
LONG = "https://example.org/" + "a" * 180


def _document(labels: ValueLabels | None, d: int = 16) -> dict:
    oracle = ldpflow.oracle("grr", epsilon=3.0, domain_size=d)
    rng = np.random.default_rng(5)
    values = np.minimum(rng.geometric(0.3, size=4000) - 1, d - 1)
    acc = oracle.aggregate(oracle.perturb(values, rng=rng))
    result = estimate_result(oracle.key, acc, 0, ["base", "norm-sub"], postprocess.postprocess)
    run = run_metadata(inputs="in", files=1, runner="test", policy=None,
                       methods=["base", "norm-sub"], started="2026-01-01T00:00:00Z",
                       value_labels=labels)
    return json.loads(json.dumps(estimates_document([result], {"total": 0}, True, run=run)))


LABELS = ValueLabels({0: HOSTILE, 1: LONG, 2: "café, \"quoted\""}, "labels.csv")


def test_labels_are_shown_escaped_and_long_ones_cut_on_the_chart_only():
    page = report.render(_document(LABELS), top=5)
    assert "<script" not in page and "&lt;script&gt;alert(&quot;x&quot;)" in page
    names = re.findall(r'<text x="\d+" y="\d+" text-anchor="end">([^<]*)<title>([^<]*)</title>',
                       page)
    shown = dict(names)
    cut = next(name for name in shown if name.startswith("https://"))
    assert len(cut) == 56 and "…" in cut and cut.endswith("aaa (1)")  # the value stays
    assert shown[cut] == f"{LONG} (1)"  # the whole label in the tooltip
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; (0)" in shown
    # the table holds every label whole, in a column of its own; unlabelled: the integer
    assert f'<span class="label">{LONG}</span>' in page
    assert '<span class="label">café, &quot;quoted&quot;</span>' in page
    assert '<td class="l label"><span class="label">3</span>' in page
    assert "value 3" in page  # the chart names an unlabelled value by its integer
    # the run block shows the dictionary's version, not all its labels again
    assert f"3 labels, {LABELS.version}, from labels.csv" in page


def test_a_page_without_labels_is_as_before():
    page = report.render(_document(None), top=5)
    assert 'class="label"' not in page and "<th class=\"l\">label</th>" not in page


def test_report_checks_value_labels_against_the_estimates(tmp_path, capsys):
    labelled = tmp_path / "labelled.json"
    labelled.write_text(json.dumps(_document(LABELS)), encoding="utf-8")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(_document(None)), encoding="utf-8")
    other = tmp_path / "other.csv"
    other.write_text("0,zero\n1,one\n", encoding="utf-8")
    outside = tmp_path / "outside.csv"
    outside.write_text("0,zero\n16,sixteen\n", encoding="utf-8")
    page = tmp_path / "page.html"
    assert cli.main(["report", f"--input={plain}", f"--output={page}",
                     f"--value_labels={other}"]) == 0
    assert '<span class="label">one</span>' in page.read_text(encoding="utf-8")
    assert cli.main(["report", f"--input={labelled}", f"--output={page}"]) == 0
    assert "café" in page.read_text(encoding="utf-8")  # the document's own labels
    for source, path, message in (
            (labelled, other, "but the estimates were made with"),
            (plain, outside, "value 16 is outside [0, 16)")):
        capsys.readouterr()
        assert cli.main(["report", f"--input={source}", f"--output={tmp_path}/x.html",
                         f"--value_labels={path}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert message in err[-1], err
    assert not (tmp_path / "x.html").exists()


def test_a_tampered_label_block_is_refused():
    document = _document(LABELS)
    document["run"]["value_labels"]["labels"]["2"] = "changed"
    with pytest.raises(LabelsError, match="not to the version it records"):
        report.document_labels(document)


def test_a_headless_browser_shows_the_labels_as_text(tmp_path):
    """Chromium's DOM of a labelled page: the labels are text (the hostile one makes no
    element), whole in the table and in the chart's tooltips."""
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian package chromium; .ci/run installs it)")
    page = tmp_path / "labels.html"
    page.write_text(report.render(_document(LABELS), top=5), encoding="utf-8")
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--dump-dom", page.as_uri()], capture_output=True, timeout=120,
                         text=True).stdout
    assert "</svg>" in dom and "<script" not in dom
    assert "&lt;script&gt;alert(\"x\")&lt;/script&gt; (0)" in dom  # text in the chart
    assert f"<title>{LONG} (1)</title>" in dom  # the whole label in the tooltip
    assert f'<span class="label">{LONG}</span>' in dom  # and in the table
