"""``ldpflow report``: an estimates document -> one self-contained HTML page.

    ldpflow report --input /tmp/estimates --output report.html \\
        [--heavy_hitters /tmp/hh] [--truth /tmp/reports/truth.json] [--top 20]

``--input`` is an ``ldpflow estimate`` output directory (or its ``estimates.json``). The
page has no scripts and loads nothing: inline CSS and SVG only, so it can be mailed or
archived as it is. It shows, per parameter set: the top values with their estimates and
interval bars (the document's intervals when it has them, else the raw estimate's
``± z σ``), a comparison of the post-processing methods (with ``--truth``, their errors),
the dead letters by reason, and with ``--heavy_hitters`` the heavy hitters found. Every
string from the input is escaped.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ldpflow.pipelines.usage import HelpFormatter, check_output_file, usage_error

__all__ = ["run", "render"]

_PROG = "ldpflow report"
_Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:980px;color:#1b1f24;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:2em;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:.6em 0}td,th{padding:.25em .7em;text-align:right;
border-bottom:1px solid #eaeef2}th{background:#f6f8fa}td.l,th.l{text-align:left}
.muted{color:#57606a}.bad{color:#cf222e}svg text{font:12px system-ui,sans-serif}
"""
_PREFERRED = ("norm-sub", "base-cut", "power-ns", "mle-apx", "norm", "base-pos", "base")


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _number(value: Any, digits: int = 5) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _e(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return _e(value)
    return f"{value:.{digits}g}"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1) -> str:
    head = "".join(f'<th class="l">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join(f'<td class="l">{_e(c)}</td>' if i < left else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _intervals(result: Mapping[str, Any]) -> tuple[list[float], list[float]] | None:
    """Per-value (low, high) of the raw estimate: the document's, else ``± z σ``."""
    found = result.get("intervals")
    if isinstance(found, Mapping) and "low" in found and "high" in found:
        return list(found["low"]), list(found["high"])
    base, sigma = result.get("estimates", {}).get("base"), result.get("sigma")
    if base is None or not isinstance(sigma, (int, float)) or not math.isfinite(sigma):
        return None
    return [f - _Z95 * sigma for f in base], [f + _Z95 * sigma for f in base]


def _bars(rows: list[tuple], interval_of: str = "") -> str:
    """Horizontal bars (estimate), interval whiskers around a dot (the estimate the
    interval is of) and true-value ticks, as SVG; rows ``(name, estimate, low, high, truth,
    centre)``."""
    if not rows:
        return ""
    width, label, height = 760, 90, 22
    values = [v for row in rows for v in row[1:] if v is not None and math.isfinite(v)]
    top = max([0.0, *values]) or 1.0
    bottom = min([0.0, *values])
    span = top - bottom or 1.0

    def x(v: float) -> float:
        return label + (width - label - 10) * (v - bottom) / span

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height * len(rows) + 24}" role="img">',
             f'<line x1="{x(0):.1f}" y1="0" x2="{x(0):.1f}" y2="{height * len(rows)}" '
             'stroke="#8c959f"/>']
    for i, (name, est, low, high, truth, centre) in enumerate(rows):
        y = i * height
        left, right = sorted((x(0), x(est)))
        parts.append(f'<text x="{label - 6}" y="{y + 15}" text-anchor="end">{_e(name)}</text>')
        parts.append(f'<rect x="{left:.1f}" y="{y + 4}" width="{max(right - left, 1):.1f}" '
                     f'height="{height - 8}" fill="#54aeff"><title>{_e(name)}: '
                     f'{_number(est)}</title></rect>')
        if low is not None and high is not None:
            parts.append(f'<line x1="{x(low):.1f}" y1="{y + 11}" x2="{x(high):.1f}" '
                         f'y2="{y + 11}" stroke="#0a3069" stroke-width="1.5"/>')
        if centre is not None:
            parts.append(f'<circle cx="{x(centre):.1f}" cy="{y + 11}" r="3" fill="#0a3069"/>')
        if truth is not None:
            parts.append(f'<line x1="{x(truth):.1f}" y1="{y + 2}" x2="{x(truth):.1f}" '
                         f'y2="{y + height - 2}" stroke="#cf222e" stroke-width="2"/>')
    legend = "bar: estimate"
    if interval_of:
        legend += f"; line: interval of the {interval_of} estimate (dot)"
    if any(row[4] is not None for row in rows):
        legend += "; red: true value"
    parts.append(f'<text x="{label}" y="{height * len(rows) + 16}" class="muted">'
                 f'{_number(bottom, 3)} … {_number(top, 3)}; {_e(legend)}</text></svg>')
    return "".join(parts)


def _result_section(result: Mapping[str, Any], top: int, truth: Sequence[float] | None) -> str:
    estimates = result.get("estimates", {})
    title = (f"{result.get('oracle')}, epsilon {result.get('epsilon')}, domain size "
             f"{result.get('domain_size')}")
    out = [f"<h2>{_e(title)}</h2>",
           f'<p>{_number(result.get("n", 0))} reports estimated'
           + (", " + _number(result["duplicates"]) + " duplicates"
              if result.get("duplicates") else "")
           + f'{", " + _number(result["capped"]) + " capped" if result.get("capped") else ""}'
           f', {_number(result.get("dead_letters", 0))} dead letters'
           f'{"; σ = " + _number(result["sigma"]) if "sigma" in result else ""}.</p>']
    if result.get("error"):
        out.append(f'<p class="bad">{_e(result["error"])}</p>')
    if not estimates:
        return "".join(out)
    shown = next((m for m in _PREFERRED if m in estimates), next(iter(estimates)))
    ranked = sorted(range(len(estimates[shown])), key=lambda v: -estimates[shown][v])[:top]
    bounds = _intervals(result)
    base = estimates.get("base")
    rows = [(f"value {v}", estimates[shown][v],
             bounds[0][v] if bounds else None, bounds[1][v] if bounds else None,
             truth[v] if truth is not None and v < len(truth) else None,
             base[v] if bounds and base is not None else None) for v in ranked]
    out.append(f"<h3>Top {len(ranked)} values by {_e(shown)}</h3>")
    out.append(_bars(rows, "raw (base)" if bounds else ""))
    methods = list(estimates)
    header = ["value", *methods] + (["true"] if truth is not None else [])
    table = []
    for v in ranked:
        cells = [_number(estimates[m][v]) for m in methods]
        if truth is not None:
            cells.append(_number(truth[v]) if v < len(truth) else "")
        table.append([str(v), *cells])
    out.append(_table(header, table))
    out.append("<h3>Methods</h3>")
    rows_m = []
    for m in methods:
        freqs = estimates[m]
        row = [m, _number(sum(freqs)), _number(sum(1 for f in freqs if f != 0)),
               _number(min(freqs)), _number(max(freqs))]
        if truth is not None and len(truth) == len(freqs):
            row.append(_number(sum((f - t) ** 2 for f, t in zip(freqs, truth, strict=True))
                               / len(freqs), 4))
        rows_m.append(row)
    header_m = ["method", "sum", "nonzero", "min", "max"] + (["MSE"] if truth is not None
                                                             else [])
    out.append(_table(header_m, rows_m))
    if base is not None and bounds is not None:
        significant = [v for v in range(len(base)) if bounds[0][v] > 0]
        out.append(f"<p>{len(significant)} values have an interval above 0"
                   f"{': ' + _e(', '.join(map(str, significant[:50]))) if significant else ''}"
                   f"{' …' if len(significant) > 50 else ''}.</p>")
    return "".join(out)


def _heavy_section(document: Mapping[str, Any]) -> str:
    out = ["<h2>Heavy hitters</h2>"]
    found = document.get("top_k") or []
    out.append(f"<p>{_number(document.get('n', 0))} reports, {len(found)} values found.</p>")
    if document.get("error"):
        out.append(f'<p class="bad">{_e(document["error"])}</p>')
    out.append(_bars([(str(item.get("value")), float(item.get("frequency", 0.0)), None, None,
                       None, None) for item in found[:40] if isinstance(item, Mapping)]))
    out.append(_table(["value", "frequency", "count"],
                      [[str(item.get("value")), _number(item.get("frequency")),
                        _number(item.get("count"))] for item in found
                       if isinstance(item, Mapping)]))
    for name in ("f1", "precision", "recall", "ncr"):
        score = (document.get("scores") or {}).get(name)
        if score is not None:
            out.append(f"<p>{_e(name)}: {_number(score, 4)}</p>")
    return "".join(out)


def render(document: Mapping[str, Any], heavy_hitters: Mapping[str, Any] | None = None,
           truth: Mapping[str, Any] | None = None, top: int = 20,
           title: str = "ldpflow estimates") -> str:
    """The HTML page of an ``estimates.json`` document (and optionally a
    ``heavy_hitters.json`` document and a ``truth.json`` of true counts)."""
    frequencies = None
    if truth and truth.get("counts"):
        total = sum(truth["counts"]) or 1
        frequencies = [c / total for c in truth["counts"]]
    dead = document.get("dead_letters", {}) or {}
    accounting = [["records", _number(document.get("records", 0))],
                  ["reports estimated", _number(document.get("reports_estimated", 0))],
                  ["duplicates", _number(document.get("duplicates", 0))]]
    contribution = document.get("contribution")
    if contribution:
        accounting.append(["capped", _number(contribution.get("reports_capped", 0))])
    accounting.append(["dead letters", _number(dead.get("total", 0))])
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{_e(title)}</h1>"]
    run = document.get("run")
    if isinstance(run, Mapping):
        parts.append(_table(["run", ""], [[k, _e(json.dumps(v) if not isinstance(v, str)
                                                 else v)] for k, v in run.items()]))
    parts.append(_table(["records", ""], accounting))
    if contribution:
        parts.append(f"<p>At most {_number(contribution.get('max_reports_per_user'))} "
                     f"reports per user; the most one user spent: epsilon "
                     f"{_number(contribution.get('max_epsilon_per_user'))}.</p>")
    results = document.get("results") or []
    if len(results) != 1:
        frequencies = None  # truth.json describes one population
    for result in results:
        parts.append(_result_section(result, top, frequencies))
    parts.append("<h2>Dead letters</h2>")
    reasons = dead.get("by_reason") or {}
    if reasons:
        parts.append(_table(["reason", "records"],
                            [[reason, _number(count)] for reason, count in reasons.items()]))
    else:
        parts.append("<p>None: every record was a valid report.</p>")
    if heavy_hitters is not None:
        parts.append(_heavy_section(heavy_hitters))
    parts.append('<p class="muted">Written by ldpflow report.</p></body></html>')
    return "".join(parts)


def _load(path: str, name: str, flag: str) -> dict:
    if os.path.isdir(path):
        path = os.path.join(path, name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise usage_error(_PROG, f"cannot read {flag} {path!r}: {exc}") from None


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=_PROG, formatter_class=HelpFormatter,
                                     allow_abbrev=False,
                                     description="An estimates document -> one self-contained "
                                                 "HTML page.")
    parser.add_argument("--input", required=True,
                        help="An ldpflow estimate output directory, or its estimates.json.")
    parser.add_argument("--output", required=True, help="The HTML file to write.")
    parser.add_argument("--heavy_hitters", default=None,
                        help="An ldpflow heavy-hitters output directory or its "
                             "heavy_hitters.json, to add.")
    parser.add_argument("--truth", default=None,
                        help="truth.json of ldpflow simulate: true frequencies beside the "
                             "estimates, and each method's error.")
    parser.add_argument("--top", type=int, default=20, help="How many top values to show.")
    parser.add_argument("--title", default="ldpflow estimates", help="The page's title.")
    args = parser.parse_args(argv)
    if args.top < 1:
        raise usage_error(_PROG, f"--top must be a positive integer, got {args.top}")
    check_output_file(args.output, _PROG)  # before the inputs are read and the page made
    document = _load(args.input, "estimates.json", "--input")
    heavy = (_load(args.heavy_hitters, "heavy_hitters.json", "--heavy_hitters")
             if args.heavy_hitters else None)
    truth = _load(args.truth, "truth.json", "--truth") if args.truth else None
    page = render(document, heavy, truth, args.top, args.title)
    folder = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(folder, exist_ok=True)
    temporary = args.output + ".partial"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(temporary, args.output)  # whole or not at all
    print(f"{_PROG}: wrote {args.output} ({len(page):,} bytes)")
    return 0
