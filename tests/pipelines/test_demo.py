"""``ldpflow demo``: the table and the plot show each method's intervals."""

from __future__ import annotations

import numpy as np
import pytest

from ldpflow.pipelines import demo


def _result(d: int = 8) -> tuple[np.ndarray, dict]:
    truth = np.array([0.4, 0.2, 0.15, 0.1, 0.07, 0.05, 0.02, 0.01])[:d]
    base = truth + np.array([0.01, -0.02, 0.01, -0.05, 0.0, -0.06, -0.04, -0.03])[:d]
    sub = np.maximum(base - 0.01, 0)
    result = {"estimates": {"base": base.tolist(), "norm-sub": sub.tolist(),
                            "power-ns": truth.tolist()},
              "intervals": {"low": (base - 0.03).tolist(), "high": (base + 0.03).tolist()},
              "method_intervals": {"norm-sub": {"low": np.maximum(sub - 0.02, 0).tolist(),
                                                "high": (sub + 0.03).tolist()}},
              "method_intervals_missing": {"power-ns": "no bootstrap"}}
    return truth, result


def test_the_plot_has_bands_and_labelled_ticks_below_zero():
    """Before: no bands, and a negative estimate drawn below 0 where the symlog axis had no
    ticks."""
    pytest.importorskip("matplotlib")
    truth, result = _result()
    fig = demo._figure(truth, result, ("base", "norm-sub", "power-ns"), np.arange(8), "t")
    ax = fig.axes[0]
    bands = [c for c in ax.collections if type(c).__name__ in ("PolyCollection",
                                                                 "FillBetweenPolyCollection")]
    assert len(bands) == 2  # base and norm-sub have intervals, power-ns none
    ticks = ax.get_yticks()
    lowest = min(min(result["estimates"]["base"]), min(result["intervals"]["low"]))
    bottom = ax.get_ylim()[0]
    assert bottom <= lowest < 0
    below = [t for t in ticks if t < 0 and t >= bottom]
    assert below, ticks  # the negative region is labelled
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert "0" in labels and any(label.startswith("-") for label in labels)


def test_interval_cells_show_bounds_or_none():
    truth, result = _result()
    assert demo._interval_cell(demo._bounds(result, "norm-sub"), 0) == "[ 0.38000, 0.43000]"
    assert demo._bounds(result, "power-ns") is None
    assert demo._interval_cell(None, 0).strip() == "(none)"
    low, high = demo._bounds(result, "base")
    np.testing.assert_allclose(high - low, 0.06)


def test_the_plot_names_each_value_by_its_label_as_text():
    """Before: the x axis showed ranks only; labels could not be attached."""
    pytest.importorskip("matplotlib")
    from ldpflow.wire.labels import ValueLabels

    truth, result = _result()
    labels = ValueLabels({0: "price $5^2$", 1: "two\nlines", 3: "https://example.org/" + "a" * 40})
    top = np.array([1, 0, 3, 2])
    fig = demo._figure(truth, result, ("base", "norm-sub"), top, "t", labels)
    ticks = fig.axes[0].get_xticklabels()
    assert [t.get_text() for t in ticks] == ["two\\u000alines", "price $5^2$",
                                             "https://examp…aaaaaa", "2"]
    assert not any(t.get_parse_math() for t in ticks)  # "$5^2$" is text, not a formula
    import io

    fig.savefig(io.BytesIO(), format="png")  # renders (a formula parse would fail here)
    assert len(ticks[2].get_text()) <= demo.TICK_LABEL


def test_demo_refuses_labels_outside_its_domain_before_running(tmp_path):
    path = tmp_path / "labels.csv"
    path.write_text("0,a\n70,b\n", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        demo.run(["--domain_size", "64", "--output", str(tmp_path / "out"),
                  "--value_labels", str(path)])
    text = str(info.value.code)  # a usage error: one line, printed with exit 2 by the CLI
    assert text.startswith("ldpflow demo: error: ") and "\n" not in text
    assert "value 70 is outside [0, 64)" in text
    assert not (tmp_path / "out").exists()
