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
    estimate.run(["--engine=beam", f"--input={root}/reports/*.*", f"--output={root}/est",
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


# -- what a reader sees: intervals that belong to the bars, ticks, labels, twins ------------
NFC, NFD = "caf\u00e9", "cafe\u0301"


def heavy_document(values=(11749869230777074271, NFC, NFD, "plain")) -> dict:
    """A heavy_hitters.json as the job writes it (top_k with se/low/high, passes, ...)."""
    shares = [0.3, 0.2, 0.15, 0.1][: len(values)]
    top = [{"value": v, "frequency": f, "count": f * 1000, "se": 0.01,
            "low": f - 0.0196, "high": f + 0.0196} for v, f in zip(values, shares, strict=True)]
    return {"top_k": top, "configuration": {"epsilon": 4.0, "value_bits": 64, "top_k": 4,
                                            "codec": "string"},
            "n": 1000, "group_sizes": [500, 500], "error": None,
            "passes": [{"pass": 0, "label": "final estimate", "reports": 500,
                        "candidates": 4, "survivors": 4, "sigma": 0.01}],
            "results": [{"protocol": "treehist", "configuration": {
                "epsilon": 4.0, "value_bits": 64, "top_k": 4, "codec": "string"}}],
            "records": 1000, "reports": 1000, "duplicates": 0,
            "dead_letters": {"total": 0, "by_reason": {}}, "warnings": []}


def svg_bars(page: str) -> list[dict]:
    """Each bar group of the page's charts: its rect's right end, its dot and whisker ends
    (x pixels), read back from the SVG."""
    import re

    bars = []
    for group in re.findall(r'<g class="bar">(.*?)</g>', page):
        rect = re.search(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', group)
        line = re.search(r'<line x1="([\d.]+)" y1="[\d.]+" x2="([\d.]+)"', group)
        dot = re.search(r'<circle cx="([\d.]+)"', group)
        bars.append({"left": float(rect[1]), "right": float(rect[1]) + float(rect[2]),
                     "low": float(line[1]) if line else None,
                     "high": float(line[2]) if line else None,
                     "dot": float(dot[1]) if dot else None})
    return bars


def test_each_whisker_is_the_interval_of_its_own_bar(estimated):
    """Before: the whiskers were the raw estimate's intervals under norm-sub's bars, and
    some bars ended outside them. Now the whisker is the shown method's own interval: the
    bar's end (its estimate) lies inside it, the dot on it."""
    with open(estimated / "est" / "estimates.json", encoding="utf-8") as f:
        document = json.load(f)
    result = document["results"][0]
    assert set(result["method_intervals"]) == {"norm-sub", "base-cut"}
    page = report.render(document, top=20)
    assert "Top 20 values by norm-sub" in page
    bars = svg_bars(page)
    assert len(bars) == 20
    for bar in bars:
        assert bar["low"] <= bar["right"] + 0.05 and bar["right"] <= bar["high"] + 0.05
        assert bar["dot"] == pytest.approx(bar["right"], abs=0.11)  # 1 px rounding of rect
    own = result["method_intervals"]["norm-sub"]
    top = sorted(range(64), key=lambda v: -result["estimates"]["norm-sub"][v])[0]
    assert f"<td>{report._number(own['low'][top])}</td>" in page  # bounds in the table


def test_the_chart_has_an_axis_with_ticks():
    document = {"results": [{"oracle": "grr", "epsilon": 1.0, "domain_size": 3, "n": 10,
                             "estimates": {"base": [0.183, -0.02, 0.05]}, "sigma": 0.01}]}
    page = report.render(document)
    import re

    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', page)
    assert ticks == ["-0.05", "0", "0.05", "0.10", "0.15", "0.20", "0.25"]
    assert "0 … 0.183" not in page  # the old caption in place of an axis


def test_a_heavy_hitter_page_from_heavy_hitters_json_alone(tmp_path, capsys):
    """Before: exit 0 with a page reading 'None, epsilon None, domain size None'."""
    source = tmp_path / "hh"
    source.mkdir()
    (source / "heavy_hitters.json").write_text(json.dumps(heavy_document()), encoding="utf-8")
    for given in (source, source / "heavy_hitters.json"):
        out = tmp_path / "page.html"
        assert cli.main(["report", f"--input={given}", f"--output={out}"]) == 0
        page = out.read_text(encoding="utf-8")
        assert "None" not in page and "domain size" not in page
        assert "<title>ldpflow heavy hitters</title>" in page
        assert "Heavy hitters: TREEHIST, epsilon 4.0" in page
        # The whole 64-bit label, in the chart and in the table (it was cut to 11 digits).
        assert page.count(">11749869230777074271<") >= 2
        assert "<th>low</th>" in page and len(svg_bars(page)) == 4
    # Both on one page: the estimates as --input, the heavy hitters as --heavy_hitters.
    estimates = tmp_path / "estimates.json"
    estimates.write_text(json.dumps({"results": [], "records": 0}), encoding="utf-8")
    both = tmp_path / "both.html"
    assert cli.main(["report", f"--input={estimates}", f"--heavy_hitters={source}",
                     f"--output={both}"]) == 0
    page = both.read_text(encoding="utf-8")
    assert "Dead letters" in page and "Heavy hitters: TREEHIST" in page
    # What cannot be meant is refused, naming the flag.
    assert cli.main(["report", f"--input={source}", f"--heavy_hitters={source}",
                     f"--output={tmp_path / 'x.html'}"]) == 2
    assert "--input is a heavy_hitters.json" in capsys.readouterr().err
    assert cli.main(["report", f"--input={estimates}", f"--heavy_hitters={estimates}",
                     f"--output={tmp_path / 'x.html'}"]) == 2
    assert "is not a heavy_hitters.json" in capsys.readouterr().err
    (tmp_path / "other.json").write_text(json.dumps({"something": 1}), encoding="utf-8")
    assert cli.main(["report", f"--input={tmp_path / 'other.json'}",
                     f"--output={tmp_path / 'x.html'}"]) == 2
    assert "neither an estimates.json nor a heavy_hitters.json" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_a_heavy_hitters_json_written_before_the_passes_were_named_so_reads_the_same(tmp_path):
    """A document written before the passes were named so (its old keys, at the top and in
    each result) makes the page today's document makes."""
    new = heavy_document()
    new["results"][0]["passes"] = [dict(entry) for entry in new["passes"]]

    def written_before(part):
        old = {k: v for k, v in part.items() if k != "passes"}
        old["stages"] = [{("stage" if k == "pass" else k): v  # rename: keep
                          for k, v in entry.items()} for entry in part["passes"]]
        return old

    old = written_before(new)
    old["results"] = [written_before(r) for r in new["results"]]
    assert "stages" in old and "passes" not in old  # rename: keep
    assert report.upgrade_document(old) == new
    assert report.upgrade_document(new) == new  # today's document as it is
    pages = {}
    for name, document in (("new", new), ("old", old)):
        source = tmp_path / name / "heavy_hitters.json"
        source.parent.mkdir()
        source.write_text(json.dumps(document), encoding="utf-8")
        out = tmp_path / f"{name}.html"
        assert cli.main(["report", f"--input={source}", f"--output={out}"]) == 0
        pages[name] = out.read_text(encoding="utf-8")
    assert pages["old"] == pages["new"]
    assert "<h3>Passes</h3>" in pages["new"] and "final estimate" in pages["new"]


def test_look_alike_strings_are_marked_with_their_code_points():
    """NFC and NFD forms of one string were two identical-looking rows."""
    page = report.render(None, heavy_document())
    assert page.count('<span class="twin"') == 2  # the table's two rows
    assert page.count('text-anchor="end">⚠ caf') == 2  # the chart's two labels
    assert "U+0063 U+0061 U+0066 U+00E9" in page and "U+0063 U+0061 U+0066 U+0065 U+0301" in page
    assert "2 values look like another one" in page
    assert "⚠ plain" not in page  # not a twin: unmarked
    # Full-width and case variants are look-alikes too; invisible characters are shown.
    page = report.render(None, heavy_document(("apple", "\uff21pple", "zero\u200bwidth")))
    assert "⚠ apple" in page and "U+FF21" in page
    assert "zero\\u200bwidth" in page and "zero\u200bwidth" not in page


def _chromium():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("Chromium is not installed (Debian package chromium; .ci/run installs it)")
    return browser


def test_a_headless_browser_shows_intervals_ticks_labels_and_twins(estimated, tmp_path):
    """The page as Chromium builds it (--dump-dom) holds the values, and its screenshot the
    whiskers and the twins' mark."""
    browser = _chromium()
    image_module = pytest.importorskip("PIL.Image")
    hh = tmp_path / "heavy_hitters.json"
    hh.write_text(json.dumps(heavy_document()), encoding="utf-8")
    page = tmp_path / "both.html"
    assert cli.main(["report", f"--input={estimated}/est", f"--heavy_hitters={hh}",
                     f"--truth={estimated}/reports/truth.json", f"--output={page}"]) == 0
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True,
                         timeout=120, text=True).stdout
    assert "</svg>" in dom and "Heavy hitters: TREEHIST" in dom
    assert dom.count(">11749869230777074271<") >= 2  # whole, in the chart and the table
    assert "U+0063 U+0061 U+0066 U+0065 U+0301" in dom  # the NFD twin's code points
    import re

    ticks = re.findall(r'<text class="tick"[^>]*>([^<]+)</text>', dom)
    assert "0" in ticks and len(ticks) >= 4  # both charts have axes
    with open(estimated / "est" / "estimates.json", encoding="utf-8") as f:
        result = json.load(f)["results"][0]
    own = result["method_intervals"]["norm-sub"]
    first = max(range(64), key=lambda v: result["estimates"]["norm-sub"][v])
    assert f"<td>{report._number(own['high'][first])}</td>" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([*common, f"--screenshot={shot}", "--window-size=1000,2600",
                    page.as_uri()], capture_output=True, timeout=120)
    pixels = np.asarray(image_module.open(shot).convert("RGB"), dtype=np.int64)

    def share(colour, tolerance=10):
        return int(np.all(np.abs(pixels - np.array(colour)) <= tolerance, axis=-1).sum())

    assert share((0x54, 0xAE, 0xFF)) > 5000  # the bars
    assert share((0x0A, 0x30, 0x69), 30) > 500  # the whiskers and their dots (948 seen)
    assert share((0x9A, 0x67, 0x00), 30) > 50  # the twins' mark (#9a6700)
