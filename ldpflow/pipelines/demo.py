"""``ldpflow demo``: the main job on built-in data.

Simulates users on a Zipf(1.1) population, writes their perturbed reports as Avro files
(``ldpflow simulate``), estimates them (``ldpflow estimate`` on its default engine: the job
plan in this process, no Beam, the Beam job's outputs), prints the top values'
true and estimated frequencies per post-processing method and each method's 95% interval
(``docs/uncertainty.md``), plots them with the intervals as bands
(``OUTPUT/top_values.png``) and writes ``OUTPUT/report.html`` (``ldpflow report``)::

    ldpflow demo [--oracle olh] [--users 1000000] [--epsilon 1.0] [--output demo-output] \\
        [--value_labels labels.csv]

``--value_labels`` (CSV ``value,label`` or JSON; ``docs/pipeline.md``) names the values in
the table, under the plot's x axis and in the report.
"""

from __future__ import annotations

import json
import logging
import os
import time

import numpy as np

from ldpflow.pipelines import options
from ldpflow.pipelines.usage import usage_error

__all__ = ["run"]

_LOGGER = logging.getLogger(__name__)
TABLE_METHODS = ("base", "base-cut", "norm-sub", "power-ns")


def _bounds(result: dict, method: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The 95% interval of ``method``'s estimate per value: its own (``method_intervals``),
    the raw one for ``base``; None for a method without (``method_intervals_missing``)."""
    own = (result.get("method_intervals") or {}).get(method)
    if own is None and method in ("base", "post-pos"):
        own = result.get("intervals")
    if not own:
        return None
    return np.asarray(own["low"], dtype=float), np.asarray(own["high"], dtype=float)


def _plot(path: str, truth: np.ndarray, result: dict, methods: tuple[str, ...],
          top: np.ndarray, title: str, labels=None) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _LOGGER.warning("matplotlib is not installed (pip install ldpflow[plot]): no plot")
        return False
    fig = _figure(truth, result, methods, top, title, labels)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    return True


#: The most characters of a value's label under the plot's x axis.
TICK_LABEL = 20


def _tick_labels(top: np.ndarray, labels) -> list[str]:
    """The x tick texts of the plotted values: each one's label (invisible characters
    escaped, cut in the middle past :data:`TICK_LABEL` characters), or its integer."""
    from ldpflow.pipelines.report import shown_label

    return [shown_label(labels.get(int(v)), TICK_LABEL) if labels.get(int(v)) is not None
            else str(int(v)) for v in top]


def _figure(truth: np.ndarray, result: dict, methods: tuple[str, ...], top: np.ndarray,
            title: str, labels=None):
    """The plot of the top values: true frequencies, each method's estimates and its 95%
    interval as a band, on a y axis with labelled ticks wherever the data reach. With
    ``labels`` (a :class:`~ldpflow.wire.labels.ValueLabels`), each value's label (or its
    integer) is written under the x axis, as text (a ``$`` is no formula)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter

    fig, ax = plt.subplots(figsize=(9, 4.8 if labels is None else 6.0))
    x = np.arange(top.size)
    linthresh = 1e-3
    ax.plot(x, truth[top], "k-", lw=2.5, label="true", zorder=5)
    lowest = 0.0
    for method in methods:
        freqs = np.asarray(result["estimates"][method], dtype=float)[top]
        (line,) = ax.plot(x, freqs, ".-", lw=1, ms=4, label=method, zorder=4)
        bounds = _bounds(result, method)
        if bounds is not None:  # the method's own 95% interval as a band
            ax.fill_between(x, bounds[0][top], bounds[1][top], color=line.get_color(),
                            alpha=0.15, lw=0, zorder=2)
            lowest = min(lowest, float(bounds[0][top].min()))
        lowest = min(lowest, float(freqs.min()))
    if labels is None:
        ax.set_xlabel("value, by true rank (bands: each method's 95% interval)")
    else:
        ax.set_xticks(x)
        ax.set_xticklabels(_tick_labels(top, labels), rotation=60, ha="right",
                           fontsize=6 if top.size > 25 else 8)
        for text in ax.get_xticklabels():
            text.set_parse_math(False)  # a label is text, whatever it holds
        ax.set_xlabel("value (its label), by true rank (bands: each method's 95% interval)")
    ax.set_ylabel("frequency")
    # Logarithmic above 1e-3, linear through 0 and below: every region the estimates or
    # their intervals reach has labelled ticks, negative values included.
    ax.set_yscale("symlog", linthresh=linthresh)
    top_value = float(max(truth[top].max(), *(np.max(np.asarray(result["estimates"][m])[top])
                                              for m in methods)))
    bottom = -linthresh if lowest >= -linthresh else -10 ** np.ceil(np.log10(-lowest))
    ax.set_ylim(bottom, top_value * 1.6)
    ticks = [t for t in (-1e-1, -1e-2, -1e-3, 0.0, 1e-3, 1e-2, 1e-1, 1.0)
             if bottom <= t <= top_value * 1.6]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v == 0 else f"{v:g}"))
    ax.axhline(0.0, color="0.5", lw=0.8, zorder=1)
    ax.grid(True, axis="y", color="0.92", zorder=0)
    ax.set_title(title)
    ax.legend(ncol=5, fontsize=8, loc="upper right")
    fig.tight_layout()
    return fig


def _interval_cell(bounds: tuple[np.ndarray, np.ndarray] | None, v: int) -> str:
    return (f"[{bounds[0][v]:8.5f}, {bounds[1][v]:7.5f}]" if bounds is not None
            else f"{'(none)':^20}")


def run(argv: list[str] | options.Parsed | None = None) -> int:
    args = (argv if isinstance(argv, options.Parsed) else options.parse("demo", argv)).args
    from ldpflow.pipelines import estimate, simulate
    labels = None
    if args.value_labels is not None:  # checked before anything runs
        from ldpflow.wire.labels import LabelsError, load_value_labels

        try:
            labels = load_value_labels(args.value_labels, args.domain_size)
        except LabelsError as exc:
            raise usage_error("ldpflow demo", f"--value_labels {exc}") from None

    reports_dir = os.path.join(args.output, "reports")
    estimates_dir = os.path.join(args.output, "estimates")
    started = time.perf_counter()
    simulate.run([
        "--oracle", args.oracle, "--epsilon", str(args.epsilon),
        "--domain_size", str(args.domain_size), "--users", str(args.users),
        "--distribution", "zipf:1.1", "--seed", str(args.seed), "--output", reports_dir,
    ])
    simulated = time.perf_counter()
    methods = ",".join(dict.fromkeys(("base", "base-pos", "base-cut", "norm", "norm-sub",
                                      "mle-apx", "power-ns")))
    estimate.run([
        f"--input={reports_dir}/reports-*.avro", f"--output={estimates_dir}",
        f"--methods={methods}",
        *([f"--value_labels={args.value_labels}"] if labels is not None else []),
    ])
    with open(os.path.join(estimates_dir, "estimates.json"), encoding="utf-8") as f:
        document = json.load(f)
    estimated = time.perf_counter()
    with open(os.path.join(reports_dir, "truth.json"), encoding="utf-8") as f:
        counts = np.asarray(json.load(f)["counts"], dtype=float)
    truth = counts / counts.sum()
    result = document["results"][0]
    top = np.argsort(-truth, kind="stable")[: args.top]
    print(f"\n{args.users} users, Zipf(1.1) over {args.domain_size} values, {args.oracle}, "
          f"epsilon = {args.epsilon}: {result['n']} reports estimated, "
          f"{result['dead_letters']} dead letters")
    named = labels is not None
    print("value" + (f"  {'label':<{TICK_LABEL}}" if named else "") + "     true  "
          + "  ".join(f"{m:>9}" for m in TABLE_METHODS))
    for v in top:
        cells = "  ".join(f"{result['estimates'][m][v]:9.5f}" for m in TABLE_METHODS)
        name = f"  {_tick_labels(np.array([v]), labels)[0]:<{TICK_LABEL}}" if named else ""
        print(f"{v:5d}{name}  {truth[v]:7.5f}  {cells}")
    bounds = {m: _bounds(result, m) for m in TABLE_METHODS}
    print("\n95% intervals of each method's estimate (base: normal; the others: bootstrap)")
    print("value     true  " + "  ".join(f"{m:^20}" for m in TABLE_METHODS))
    for v in top:
        cells = "  ".join(_interval_cell(bounds[m], v) for m in TABLE_METHODS)
        print(f"{v:5d}  {truth[v]:7.5f}  {cells}")
    for method, reason in (result.get("method_intervals_missing") or {}).items():
        if method in TABLE_METHODS:
            print(f"  {method}: no intervals ({reason})")
    covered = {m: float(np.mean((b[0] <= truth) & (truth <= b[1])))
               for m, b in bounds.items() if b is not None}
    print("share of the true frequencies inside the intervals, whole domain: " + ", ".join(
        f"{m} {c:.3f}" for m, c in covered.items()))
    print("\nfull-domain MSE per method:")
    for method, freqs in result["estimates"].items():
        mse = float(np.mean((np.asarray(freqs) - truth) ** 2))
        print(f"  {method:9s} {mse:.3e}")
    plot = os.path.join(args.output, "top_values.png")
    shown = np.argsort(-truth, kind="stable")[:50]
    if _plot(plot, truth, result, TABLE_METHODS, shown,
             f"{args.oracle}, epsilon={args.epsilon}, n={args.users}: top 50 values",
             labels):
        print(f"\nplot: {plot}")
    page = os.path.join(args.output, "report.html")
    from ldpflow.pipelines import report

    report.run(["--input", estimates_dir, "--truth", os.path.join(reports_dir, "truth.json"),
                "--output", page, "--title", f"ldpflow demo: {args.oracle}, epsilon "
                                             f"{args.epsilon}, {args.users} users"])
    print(f"estimates: {estimates_dir}/estimates.json  (simulate {simulated - started:.1f}s, "
          f"estimate {estimated - simulated:.1f}s)")
    return 0
