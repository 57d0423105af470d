"""``ldpflow report``: estimates and/or heavy hitters -> one self-contained HTML page.

    ldpflow report --input /tmp/estimates --output report.html \\
        [--heavy_hitters /tmp/hh] [--truth /tmp/reports/truth.json] [--top 20]
    ldpflow report --input /tmp/hh --output hh.html [--truth /tmp/hh-reports/truth.json]

``--input`` is an ``ldpflow estimate`` output directory (or its ``estimates.json``), or an
``ldpflow heavy-hitters`` output (or its ``heavy_hitters.json``) for a heavy-hitter page on
its own; ``--heavy_hitters`` adds the heavy hitters to an estimates page: one page for both.
The page has no scripts and loads nothing: inline CSS and SVG only, so it can be mailed or
archived as it is. It shows, per parameter set: the top values of the shown method with, as
a whisker on each bar, the interval of that same estimate (its bootstrap interval from
``"method_intervals"``, or the raw estimate's normal interval for ``base``), on an x axis
with ticks; a comparison of the post-processing methods (with ``--truth``, their errors and
the share of true values their intervals hold); the dead letters by reason; and the heavy
hitters found, with their intervals, labels shown whole and decoded. Invisible characters
in string values are shown as escapes, and values that look alike (equal after Unicode
normalisation, such as the NFC and NFD forms of one string) are marked with a warning sign
and their code points. Every string from the input is escaped.

Value labels (``--value_labels FILE``, or those the estimates' run block records; the two
must be one dictionary, and every labelled value must lie in each result's domain, else a
usage error) name each bar ``LABEL (VALUE)`` and fill a label column of the table; a value
without one shows its integer (docs/pipeline.md, "Value labels and CSV output").
"""

from __future__ import annotations

import html
import json
import math
import os
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from ldpflow.pipelines import options
from ldpflow.pipelines.usage import check_output_file, usage_error

__all__ = ["run", "render", "is_heavy_hitters", "upgrade_document", "document_labels",
           "check_labels", "visible", "shown_label"]

_PROG = "ldpflow report"
_Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:980px;color:#1b1f24;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:2em;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;margin:.6em 0}td,th{padding:.25em .7em;text-align:right;
border-bottom:1px solid #eaeef2}th{background:#f6f8fa}td.l,th.l{text-align:left}
.muted{color:#57606a}.bad{color:#cf222e}svg text{font:12px system-ui,sans-serif}
svg text.tick{fill:#57606a;font-size:11px}.twin{color:#9a6700;font-weight:600}
td.label{max-width:28em;overflow-wrap:anywhere}
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


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1,
           markup_left: bool = False) -> str:
    """A table; the first ``left`` columns are left-aligned text (escaped here unless
    ``markup_left``: then the caller escaped them), the others markup."""
    head = "".join(f'<th class="l">{_e(h)}</th>' if i < left else f"<th>{_e(h)}</th>"
                   for i, h in enumerate(header))
    body = "".join(
        "<tr>" + "".join((_left_cell(c, markup_left) if i < left
                          else f"<td>{c}</td>") for i, c in enumerate(row)) + "</tr>"
        for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _left_cell(cell: Any, markup: bool) -> str:
    text = cell if markup else _e(cell)
    if markup and isinstance(cell, str) and cell.startswith('<span class="label">'):
        return f'<td class="l label">{text}</td>'  # a label: wrapped wherever it must be
    return f'<td class="l">{text}</td>'


def _intervals(result: Mapping[str, Any], method: str
               ) -> tuple[list[float], list[float], str] | None:
    """Per-value (low, high) of ``method``'s estimate and what they are: its own bootstrap
    intervals (``"method_intervals"``), the raw estimate's for ``base``/``post-pos``
    (``"intervals"``, else ``± z σ`` of an older document), or None."""
    own = (result.get("method_intervals") or {}).get(method)
    if isinstance(own, Mapping) and "low" in own and "high" in own:
        return list(own["low"]), list(own["high"]), "bootstrap"
    if method not in ("base", "post-pos"):
        return None
    found = result.get("intervals")
    if isinstance(found, Mapping) and "low" in found and "high" in found:
        return list(found["low"]), list(found["high"]), "normal"
    base, sigma = result.get("estimates", {}).get("base"), result.get("sigma")
    if base is None or not isinstance(sigma, (int, float)) or not math.isfinite(sigma):
        return None
    return [f - _Z95 * sigma for f in base], [f + _Z95 * sigma for f in base], "± 1.96 σ"


def _nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2, 2.5 or 5 times a power of ten) from at or below ``low`` to
    at or above ``high``: the axis runs from the first to the last."""
    span = high - low
    if not span > 0 or not math.isfinite(span):
        return [low, low + 1.0]
    raw = span / max(count - 1, 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    first = math.floor(low / step + 1e-9)
    last = math.ceil(high / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def _tick_label(value: float, step: float) -> str:
    """``value`` with as many decimals as the step needs (0.05 -> 2, 0.025 -> 3)."""
    digits = 0
    while digits < 12 and abs(round(step, digits) - step) > step * 1e-6:
        digits += 1
    text = f"{value:.{digits}f}"
    return "0" if float(text) == 0 else text


def _label_width(names: Sequence[str]) -> int:
    """Pixels for the longest label at 12px (about 7.2 px a character), at least 60."""
    return max(60, min(420, int(max((len(n) for n in names), default=4) * 7.2) + 14))


def _bars(rows: list[tuple], interval_of: str = "") -> str:
    """Horizontal bars (estimate) with the interval of that same estimate as a whisker
    through a dot at the bar's end, true-value marks, and an x axis with ticks, as SVG;
    rows ``(name, estimate, low, high, truth)``, ``name`` shown whole (up to 56
    characters; longer ones are cut in the middle, with their whole text in the
    tooltip)."""
    if not rows:
        return ""
    names = [shown_label(str(row[0])) for row in rows]
    label, height, plot = _label_width(names), 22, 640
    width = label + plot + 24
    values = [v for row in rows for v in row[1:5] if v is not None and math.isfinite(v)]
    ticks = _nice_ticks(min([0.0, *values]), max([0.0, *values]) or 1.0)
    bottom, top = ticks[0], ticks[-1]
    span = top - bottom
    step = ticks[1] - ticks[0]

    def x(v: float) -> float:
        return label + plot * (v - bottom) / span

    axis_y = height * len(rows) + 2
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{axis_y + 40}" role="img">']
    for t in ticks:  # grid lines and tick labels
        parts.append(f'<line x1="{x(t):.1f}" y1="0" x2="{x(t):.1f}" y2="{axis_y + 4}" '
                     f'stroke="{"#8c959f" if t == 0 else "#eaeef2"}"/>')
        parts.append(f'<text class="tick" x="{x(t):.1f}" y="{axis_y + 17}" '
                     f'text-anchor="middle">{_e(_tick_label(t, step))}</text>')
    parts.append(f'<line x1="{label}" y1="{axis_y}" x2="{label + plot}" y2="{axis_y}" '
                 'stroke="#57606a"/>')
    for i, ((_, est, low, high, truth), name) in enumerate(zip(rows, names, strict=True)):
        y = i * height
        left, right = sorted((x(0), x(est)))
        full = visible(str(rows[i][0]))
        parts.append(f'<text x="{label - 6}" y="{y + 15}" text-anchor="end">{_e(name)}'
                     f'<title>{_e(full)}</title></text>')
        parts.append(f'<g class="bar"><rect x="{left:.1f}" y="{y + 4}" '
                     f'width="{max(right - left, 1):.1f}" height="{height - 8}" '
                     f'fill="#54aeff"/>')
        tip = f"{full}: {_number(est)}"
        if low is not None and high is not None:
            tip += f" [{_number(low)}, {_number(high)}]"
            parts.append(f'<line x1="{x(low):.1f}" y1="{y + 11}" x2="{x(high):.1f}" '
                         f'y2="{y + 11}" stroke="#0a3069" stroke-width="1.5"/>')
            for end in (low, high):
                parts.append(f'<line x1="{x(end):.1f}" y1="{y + 7}" x2="{x(end):.1f}" '
                             f'y2="{y + 15}" stroke="#0a3069" stroke-width="1.5"/>')
            parts.append(f'<circle cx="{x(est):.1f}" cy="{y + 11}" r="3" fill="#0a3069"/>')
        parts.append(f"<title>{_e(tip)}</title></g>")
        if truth is not None:
            parts.append(f'<line x1="{x(truth):.1f}" y1="{y + 2}" x2="{x(truth):.1f}" '
                         f'y2="{y + height - 2}" stroke="#cf222e" stroke-width="2"/>')
    legend = "bar: estimate (frequency, the x axis)"
    if interval_of:
        legend += f"; whisker: its {interval_of}"
    if any(row[4] is not None for row in rows):
        legend += "; red: true value"
    parts.append(f'<text x="{label}" y="{axis_y + 34}" class="muted">{_e(legend)}</text>'
                 "</svg>")
    return "".join(parts)


# -- labels: decoded strings, invisible characters and look-alike twins ---------------------
_MAX_LABEL = 56


def _code_points(text: str) -> str:
    return " ".join(f"U+{ord(c):04X}" for c in text)


def visible(text: str) -> str:
    """``text`` with its invisible characters (controls, format characters such as
    zero-width joiners, non-ASCII spaces) written as ``\\u`` escapes, so they show."""
    out = []
    for c in text:
        category = unicodedata.category(c)
        if category[0] in "CZ" and c != " ":
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}")
        else:
            out.append(c)
    return "".join(out)


def shown_label(text: str, limit: int = _MAX_LABEL) -> str:
    """At most ``limit`` characters, invisible ones escaped: a longer label keeps its start
    and its end (a URL's last part, the ``(VALUE)`` after a value's label) around an
    ellipsis."""
    shown = visible(text)
    if len(shown) <= limit:
        return shown
    tail = min(16, (limit - 1) // 3)
    return shown[: limit - tail - 1] + "…" + shown[-tail:]


def _twins(labels: Sequence[Any]) -> dict[str, str]:
    """The string labels that look alike another one (equal after NFKC normalisation, which
    also merges NFC/NFD forms and compatibility variants such as full-width letters), each
    mapped to a note naming its code points and its twins'."""
    groups: dict[str, list[str]] = {}
    for value in labels:
        if isinstance(value, str):
            forms = groups.setdefault(unicodedata.normalize("NFKC", value).casefold(), [])
            if value not in forms:
                forms.append(value)
    notes = {}
    for forms in groups.values():
        if len(forms) > 1:
            for value in forms:
                others = "; ".join(_code_points(o) for o in forms if o != value)
                form = ("NFC" if unicodedata.is_normalized("NFC", value) else
                        "NFD" if unicodedata.is_normalized("NFD", value) else "other")
                notes[value] = (f"looks like another value: this one is {form}, "
                                f"{_code_points(value)}; its twin: {others}")
    return notes


def _label_cell(value: Any, notes: Mapping[str, str]) -> str:
    """A value's table cell: the decoded string (invisible characters escaped), and for a
    look-alike twin a visible mark, its code points and a tooltip."""
    if not isinstance(value, str):
        return _e(value)
    cell = _e(visible(value))
    if value in notes:
        cell = (f'<span class="twin" title="{_e(notes[value])}">⚠ {cell}</span>'
                f'<br><small class="muted">{_e(_code_points(value))}</small>')
    return cell


def _value_name(value: int, labels: Any) -> str:
    """A value as the chart names it: ``LABEL (VALUE)``, or ``value VALUE`` unlabelled."""
    label = labels.get(value) if labels is not None else None
    return f"{label} ({value})" if label is not None else f"value {value}"


def _label_text(value: int, labels: Any) -> str:
    """A label's table cell (escaped, invisible characters shown), or the integer."""
    label = labels.get(value) if labels is not None else None
    return _e(visible(label)) if label is not None else _e(value)


def _result_section(result: Mapping[str, Any], top: int, truth: Sequence[float] | None,
                    labels: Any = None) -> str:
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
    # The method shown: the first preferred one that has intervals of its own, else the
    # first preferred one.
    present = [m for m in _PREFERRED if m in estimates] or list(estimates)[:1]
    shown = next((m for m in present if _intervals(result, m) is not None), present[0])
    ranked = sorted(range(len(estimates[shown])), key=lambda v: -estimates[shown][v])[:top]
    bounds = _intervals(result, shown)
    rows = [(_value_name(v, labels), estimates[shown][v],
             bounds[0][v] if bounds else None, bounds[1][v] if bounds else None,
             truth[v] if truth is not None and v < len(truth) else None) for v in ranked]
    out.append(f"<h3>Top {len(ranked)} values by {_e(shown)}</h3>")
    confidence = _confidence(result, shown)
    out.append(_bars(rows, f"{confidence} interval ({bounds[2]})" if bounds else ""))
    methods = list(estimates)
    header = ["value", *(["label"] if labels is not None else []), *methods]
    if bounds:
        header += [f"{shown} low", f"{shown} high"]
    header += ["true"] if truth is not None else []
    table = []
    for v in ranked:
        cells = [_number(estimates[m][v]) for m in methods]
        if bounds:
            cells += [_number(bounds[0][v]), _number(bounds[1][v])]
        if truth is not None:
            cells.append(_number(truth[v]) if v < len(truth) else "")
        if labels is not None:
            table.append([_e(v), f'<span class="label">{_label_text(v, labels)}</span>',
                          *cells])
        else:
            table.append([_e(v), *cells])
    out.append(_table(header, table, left=2 if labels is not None else 1, markup_left=True))
    out.append("<h3>Methods</h3>")
    rows_m = []
    for m in methods:
        freqs = estimates[m]
        own = _intervals(result, m)
        row = [m, _number(sum(freqs)), _number(sum(1 for f in freqs if f != 0)),
               _number(min(freqs)), _number(max(freqs)),
               _e(own[2]) if own else _e((result.get("method_intervals_missing") or {})
                                         .get(m, "none"))]
        if truth is not None and len(truth) == len(freqs):
            row.append(_number(sum((f - t) ** 2 for f, t in zip(freqs, truth, strict=True))
                               / len(freqs), 4))
            if own:
                inside = sum(1 for lo, hi, t in zip(own[0], own[1], truth, strict=True)
                             if lo <= t <= hi)
                row.append(_number(inside / len(truth), 3))
            else:
                row.append("")
        rows_m.append(row)
    header_m = ["method", "sum", "nonzero", "min", "max", "intervals"] + (
        ["MSE", "covered"] if truth is not None else [])
    out.append(_table(header_m, rows_m))
    raw = _intervals(result, "base")
    if raw is not None and "base" in estimates:
        significant = [v for v in range(len(raw[0])) if raw[0][v] > 0]
        named = [str(v) if labels is None or labels.get(v) is None
                 else f"{v} ({visible(labels.get(v))})" for v in significant[:50]]
        out.append(f"<p>{len(significant)} values have a raw interval above 0"
                   f"{': ' + _e(', '.join(named)) if significant else ''}"
                   f"{' …' if len(significant) > 50 else ''}.</p>")
    return "".join(out)


def _confidence(result: Mapping[str, Any], method: str) -> str:
    own = (result.get("method_intervals") or {}).get(method) or result.get("intervals") or {}
    level = own.get("confidence", 0.95) if isinstance(own, Mapping) else 0.95
    return f"{100 * float(level):g}%"


def _heavy_title(document: Mapping[str, Any]) -> str:
    configuration = document.get("configuration") or {}
    if not isinstance(configuration, Mapping) or not configuration:
        return "Heavy hitters"
    protocol = next((r.get("protocol") for r in document.get("results") or []
                     if isinstance(r, Mapping) and r.get("configuration") == configuration),
                    None)
    name = str(protocol or "heavy hitters").upper()
    details = ", ".join(f"{k} {configuration[k]}" for k in
                        ("epsilon", "value_bits", "top_k", "codec") if k in configuration)
    return f"Heavy hitters: {name}, {details}" if details else f"Heavy hitters: {name}"


def _heavy_section(document: Mapping[str, Any], truth: Mapping[Any, float] | None = None
                   ) -> str:
    out = [f"<h2>{_e(_heavy_title(document))}</h2>"]
    found = [item for item in document.get("top_k") or [] if isinstance(item, Mapping)]
    out.append(f"<p>{_number(document.get('n', 0))} reports, {len(found)} values found"
               f"{', ' + _number(document.get('dead_letters', {}).get('total', 0)) + ' dead letters' if isinstance(document.get('dead_letters'), Mapping) else ''}"  # noqa: E501
               ".</p>")
    for warning in document.get("warnings") or []:
        out.append(f'<p class="bad">{_e(warning)}</p>')
    if document.get("error"):
        out.append(f'<p class="bad">{_e(document["error"])}</p>')
    notes = _twins([item.get("value") for item in found])
    has_intervals = any("low" in item and "high" in item for item in found)

    def number(item: Mapping[str, Any], name: str) -> float | None:
        value = item.get(name)
        return float(value) if isinstance(value, (int, float)) else None

    rows = [(("⚠ " if item.get("value") in notes else "") + str(item.get("value")),
             number(item, "frequency") or 0.0, number(item, "low"), number(item, "high"),
             truth.get(item.get("value")) if truth else None) for item in found[:40]]
    out.append(_bars(rows, "95% interval (normal)" if has_intervals else ""))
    header = ["value", "frequency"] + (["se", "low", "high"] if has_intervals else []) + [
        "count"]
    table = []
    for item in found:
        cells = [_label_cell(item.get("value"), notes), _number(item.get("frequency"))]
        if has_intervals:
            cells += [_number(item.get("se", "")), _number(item.get("low", "")),
                      _number(item.get("high", ""))]
        table.append([*cells, _number(item.get("count"))])
    out.append(_table(header, table, markup_left=True))
    if notes:
        out.append(f'<p class="bad">⚠ {len(notes)} values look like another one (equal '
                   "after Unicode normalisation, e.g. NFC and NFD forms of one string): "
                   "they are different values to the protocol; their code points are "
                   "shown under each.</p>")
    for name in ("f1", "precision", "recall", "ncr"):
        score = (document.get("scores") or {}).get(name)
        if score is not None:
            out.append(f"<p>{_e(name)}: {_number(score, 4)}</p>")
    passes = [s for s in document.get("passes") or [] if isinstance(s, Mapping)]
    if passes:
        out.append("<h3>Passes</h3>")
        out.append(_table(["pass", "reports", "candidates", "survivors", "σ"],
                          [[str(s.get("label", s.get("step"))), _number(s.get("reports")),
                            _number(s.get("candidates")), _number(s.get("survivors")),
                            _number(s.get("sigma")) if s.get("sigma") is not None else ""]
                           for s in passes]))
    return "".join(out)


def is_heavy_hitters(document: Mapping[str, Any]) -> bool:
    """Whether ``document`` is a ``heavy_hitters.json`` (it has ``top_k`` and ``passes``)
    rather than an ``estimates.json``."""
    return isinstance(document, Mapping) and "top_k" in document and "passes" in document


def _heavy_truth(truth: Mapping[str, Any] | None) -> dict[Any, float] | None:
    """``{value: true share}`` of a heavy-hitter ``truth.json`` (its ``top`` and ``users``)."""
    if not truth or not isinstance(truth.get("top"), list) or not truth.get("users"):
        return None
    users = float(truth["users"])
    return {item["value"]: item["count"] / users for item in truth["top"]
            if isinstance(item, Mapping) and "value" in item and "count" in item}


def render(document: Mapping[str, Any] | None, heavy_hitters: Mapping[str, Any] | None = None,
           truth: Mapping[str, Any] | None = None, top: int = 20,
           title: str | None = None, labels: Any = None) -> str:
    """The HTML page of an ``estimates.json`` document and/or a ``heavy_hitters.json``
    document (``document`` None: a heavy-hitter page alone), with optionally a
    ``truth.json`` of ``ldpflow simulate`` (true counts, or for heavy hitters the true top
    values). ``title`` defaults to "ldpflow estimates" ("ldpflow heavy hitters" for a
    heavy-hitter page alone). ``labels`` (a :class:`~ldpflow.wire.labels.ValueLabels`;
    default: those the document's run block records) name the values: ``LABEL (VALUE)`` on
    the chart, a label column in the table; a value without one shows its integer."""
    if title is None:
        title = "ldpflow estimates" if document is not None else "ldpflow heavy hitters"
    parts = ["<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">",
             f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
             f"<h1>{_e(title)}</h1>"]
    if document is not None:
        if labels is None:
            labels = document_labels(document)
        parts.append(_estimates_part(document, truth, top, labels))
    if heavy_hitters is not None:
        parts.append(_heavy_section(heavy_hitters, _heavy_truth(truth)))
    parts.append('<p class="muted">Written by ldpflow report.</p></body></html>')
    return "".join(parts)


def document_labels(document: Mapping[str, Any]):
    """The :class:`~ldpflow.wire.labels.ValueLabels` an estimates document's run block
    records (checked against its version), or None."""
    from ldpflow.wire.labels import ValueLabels

    run = document.get("run")
    block = run.get("value_labels") if isinstance(run, Mapping) else None
    return ValueLabels.from_run_block(block) if block else None


def _run_cell(name: str, value: Any) -> str:
    if name == "value_labels" and isinstance(value, Mapping):  # the version, not every label
        return _e(f"{value.get('count')} labels, {value.get('version')}, from "
                  f"{value.get('file')}")
    return _e(json.dumps(value) if not isinstance(value, str) else value)


def _estimates_part(document: Mapping[str, Any], truth: Mapping[str, Any] | None,
                    top: int, labels: Any = None) -> str:
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
    parts = []
    run = document.get("run")
    if isinstance(run, Mapping):
        parts.append(_table(["run", ""], [[k, _run_cell(k, v)] for k, v in run.items()]))
    parts.append(_table(["records", ""], accounting))
    if contribution:
        parts.append(f"<p>At most {_number(contribution.get('max_reports_per_user'))} "
                     f"reports per user; the most one user spent: epsilon "
                     f"{_number(contribution.get('max_epsilon_per_user'))}.</p>")
    results = document.get("results") or []
    if len(results) != 1:
        frequencies = None  # truth.json describes one population
    for result in results:
        parts.append(_result_section(result, top, frequencies, labels))
    parts.append("<h2>Dead letters</h2>")
    reasons = dead.get("by_reason") or {}
    if reasons:
        parts.append(_table(["reason", "records"],
                            [[reason, _number(count)] for reason, count in reasons.items()]))
    else:
        parts.append("<p>None: every record was a valid report.</p>")
    return "".join(parts)


#: The keys of a heavy_hitters.json written before its passes were named so (old -> today's):
#: the per-pass list and each entry's index, at the top and in each of ``results``.
_OLD_PASS_KEYS = {"stages": "passes"}  # rename: keep
_OLD_ENTRY_KEYS = {"stage": "pass"}  # rename: keep


def upgrade_document(document: Any) -> Any:
    """``document`` with today's key names: a heavy_hitters.json written before the passes
    were named so reads as one written now; any other document is returned as it is."""
    if not isinstance(document, dict) or "top_k" not in document:
        return document

    def upgrade(part: Any) -> Any:
        if not isinstance(part, dict):
            return part
        out = dict(part)
        for old, new in _OLD_PASS_KEYS.items():
            if old in out and new not in out:
                entries = out.pop(old)
                out[new] = [{_OLD_ENTRY_KEYS.get(k, k): v for k, v in e.items()}
                            if isinstance(e, dict) else e for e in entries or []]
        return out

    out = upgrade(document)
    if isinstance(out.get("results"), list):
        out["results"] = [upgrade(r) for r in out["results"]]
    return out


def _load(path: str, names: Sequence[str], flag: str) -> dict:
    """The JSON document at ``path``, or in the directory ``path`` the first of ``names``
    that exists there."""
    if os.path.isdir(path):
        found = [os.path.join(path, n) for n in names if os.path.exists(os.path.join(path, n))]
        path = found[0] if found else os.path.join(path, names[0])
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, ValueError) as exc:
        raise usage_error(_PROG, f"cannot read {flag} {path!r}: {exc}") from None
    if not isinstance(document, dict):
        raise usage_error(_PROG, f"{flag} {path!r} is not an ldpflow document (a JSON object)")
    return upgrade_document(document)


def check_labels(document: Mapping[str, Any], labels: Any) -> None:
    """Refuse ``labels`` (a :class:`~ldpflow.wire.labels.ValueLabels`) for an estimates
    document: a dictionary other than the one its run block records (the estimates were
    labelled, or their reports encoded, with another), or labels of values outside a
    result's domain.

    Raises
    ------
    ldpflow.wire.labels.LabelsError
        One line saying which.
    """
    from ldpflow.wire.labels import LabelsError

    recorded = document_labels(document)
    if recorded is not None and recorded.version != labels.version:
        raise LabelsError(f"{labels.source} is the dictionary {labels.version}, but the "
                          f"estimates were made with {recorded.version} (from "
                          f"{recorded.source}): give that file, or none")
    for result in document.get("results") or []:
        size = result.get("domain_size") if isinstance(result, Mapping) else None
        if isinstance(size, int):
            labels.check_domain(size, f"the domain of {result.get('oracle')} epsilon "
                                      f"{result.get('epsilon')}")


def _labels_for(document: Mapping[str, Any] | None, path: str | None):
    """The labels of the page: ``--value_labels`` (checked against the document), or the
    document's own; a one-line usage error if they cannot be used."""
    from ldpflow.wire.labels import LabelsError, load_value_labels

    try:
        if path is None:
            return document_labels(document) if document is not None else None
        labels = load_value_labels(path)
        if document is None:
            raise LabelsError("labels name the values of estimates; a heavy-hitter page "
                              "shows its values themselves")
        check_labels(document, labels)
        return labels
    except LabelsError as exc:
        raise usage_error(_PROG, f"--value_labels {exc}" if path else
                          f"--input: {exc}") from None


def run(argv: list[str] | options.Parsed | None = None) -> int:
    args = (argv if isinstance(argv, options.Parsed) else options.parse("report", argv)).args
    if args.top < 1:
        raise usage_error(_PROG, f"--top must be a positive integer, got {args.top}")
    check_output_file(args.output, _PROG)  # before the inputs are read and the page made
    document: dict | None = _load(args.input, ("estimates.json", "heavy_hitters.json"),
                                  "--input")
    heavy = (_load(args.heavy_hitters, ("heavy_hitters.json",), "--heavy_hitters")
             if args.heavy_hitters else None)
    if heavy is not None and not is_heavy_hitters(heavy):
        raise usage_error(_PROG, f"--heavy_hitters {args.heavy_hitters!r} is not a "
                                 "heavy_hitters.json (no top_k and passes)")
    if is_heavy_hitters(document):  # a heavy-hitter report on its own
        if heavy is not None:
            raise usage_error(_PROG, "--input is a heavy_hitters.json: give the estimates "
                                     "as --input and the heavy hitters as --heavy_hitters")
        document, heavy = None, document
    elif "results" not in document:
        raise usage_error(_PROG, f"--input {args.input!r} is neither an estimates.json nor a "
                                 "heavy_hitters.json (it has no results, nor top_k and passes)")
    truth = _load(args.truth, ("truth.json",), "--truth") if args.truth else None
    labels = None
    if document is not None or args.value_labels:
        labels = _labels_for(document, args.value_labels)
    page = render(document, heavy, truth, args.top, args.title, labels)
    folder = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(folder, exist_ok=True)
    temporary = args.output + ".partial"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(temporary, args.output)  # whole or not at all
    print(f"{_PROG}: wrote {args.output} ({len(page):,} bytes)")
    return 0
