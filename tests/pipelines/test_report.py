"""``ldpflow report``: one self-contained, escaped HTML page, rendered by a real browser."""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from ldpflow.pipelines import cli, estimate, report, simulate

pytestmark = pytest.mark.pipeline

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def estimated(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    simulate.run(["--oracle", "olh", "--epsilon", "2", "--domain_size", "64", "--users",
                  "20000", "--seed", "3", "--output", str(root / "reports"), "--shards", "1"])
    junk = {"report_id": "j", "user_id": "u", "event_time": 0, "oracle": HOSTILE,
            "epsilon": 1.0, "domain_size": 64}
    (root / "reports" / "junk.jsonl").write_text(json.dumps(junk) + "\n")
    estimate.run([f"--input={root}/reports/*.*", f"--output={root}/est",
                  "--methods=base,norm-sub,base-cut"])
    return root


def test_the_page_shows_the_estimates_and_escapes_what_the_input_says(estimated):
    with open(estimated / "est" / "estimates.json", encoding="utf-8") as f:
        document = json.load(f)
    with open(estimated / "reports" / "truth.json", encoding="utf-8") as f:
        truth = json.load(f)
    page = report.render(document, truth=truth, top=10)
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>")
    assert "<script" not in page and "<img" not in page  # escaped, not markup
    assert "&lt;script&gt;" in page
    for method in ("base", "norm-sub", "base-cut"):
        assert f"<td class=\"l\">{method}</td>" in page  # the method comparison
    assert page.count("<svg") == 1 and page.count("<circle") == 10  # 10 intervals
    assert "MSE" in page and "20,000 reports estimated" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "src=" not in page.replace("src=x", "")  # loads nothing


def test_heavy_hitters_are_added_and_escaped():
    document = {"results": [], "records": 0, "reports_estimated": 0, "duplicates": 0,
                "dead_letters": {"total": 0, "by_reason": {}}}
    heavy = {"n": 100, "top_k": [{"value": HOSTILE, "frequency": 0.5, "count": 50},
                                 {"value": "when", "frequency": 0.25, "count": 25}]}
    page = report.render(document, heavy)
    assert "Heavy hitters" in page and "when" in page and "<script" not in page


def test_the_cli_writes_the_page_or_exits_2(estimated, capsys):
    out = estimated / "page.html"
    assert cli.main(["report", f"--input={estimated}/est", f"--output={out}",
                     f"--truth={estimated}/reports/truth.json"]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert cli.main(["report", f"--input={estimated}/nothing", f"--output={out}.2"]) == 2
    assert "cannot read --input" in capsys.readouterr().err
    assert not (estimated / "page.html.2").exists()


def test_a_headless_browser_renders_the_page(estimated, tmp_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian package chromium; .ci/run installs it)")
    image_module = pytest.importorskip("PIL.Image")
    page = estimated / "shown.html"
    assert cli.main(["report", f"--input={estimated}/est", f"--output={page}"]) == 0
    shot = tmp_path / "shot.png"
    done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                           f"--screenshot={shot}", "--window-size=1000,1200",
                           page.as_uri()], capture_output=True, timeout=120)
    assert shot.exists(), done.stderr[-2000:]
    pixels = np.asarray(image_module.open(shot).convert("RGB"), dtype=np.int64)
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    # Not blank: text, the bars' blue and the whiskers' dark blue are on the page.
    assert pixels.std() > 10 and len(colours) > 50
    blue = np.all(np.abs(pixels - np.array([0x54, 0xAE, 0xFF])) <= 8, axis=-1)
    assert blue.sum() > 2000  # the bars (#54aeff)
