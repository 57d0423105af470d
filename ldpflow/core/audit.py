"""Empirical lower bounds on a client's epsilon from reports of two known inputs.

Contract. Given ``n`` reports a client produced from the value ``v`` and ``n'`` from ``v'``,
:class:`Auditor` returns ``epsilon_lb`` such that, if the reports are independent runs of
the client's randomizer, ``epsilon_lb <= epsilon_true`` with probability at least
``1 - alpha``, whatever the client does. The claimed oracle (its registry key and
parameters) is used only to compute events and to say which law the reports should follow;
the bound itself assumes nothing about the client.

Method. ``epsilon``-LDP means ``P(S | v) <= e^epsilon P(S | v')`` for every event ``S`` of
the report space, so ``epsilon >= ln(P(S | v) / P(S | v'))``. Every report is mapped to a
*cell*, a small integer computed from the report, ``v``, ``v'`` and the claimed parameters
(:class:`CellMap`: e.g. OUE's ``(bit v, bit v')``, OLH's ``(y == H_s(v), y == H_s(v'),
H_s(v) == H_s(v'))``); an event is a set of cells. The reports of each value are split, by
position, into a *selection* part (``selection_fraction``, 10%) and a *bound* part. There
are three comparisons:

* forward ``P(S | v) / P(S | v')``, backward ``P(S | v') / P(S | v)``, and
* pooled ``(P(S | v) + P(mS | v')) / (P(S | v') + P(mS | v))``, where ``m`` swaps the roles
  of ``v`` and ``v'`` (the sum of two of the inequalities above, so also ``<= e^epsilon``),

and an event and comparison are chosen on the selection part. The *designed* event is the
pooled event of largest bound under the claimed law (:func:`resolution`; OUE: bit ``v`` set
and bit ``v'`` not, OLH: ``y = H_s(v) != H_s(v')``, ...), fixed before any report is seen.
The *search* ranks the cells of each comparison by their likelihood ratio on one half of the
selection part (the ranking part) and takes every prefix of the ranking as a candidate (for
a given mass, prefix sets maximise the ratio: Neyman-Pearson); grr and hr reports are also
searched over their raw outputs. Every candidate's bound is predicted, at the bound part's
size, from the other half (the scoring part); a searched event must beat the designed one by
:data:`ALTERNATIVE_PENALTY` standard deviations of its scoring-part estimate, so the search
finds clients whose leak the designed event misses, and the luck of a small selection part
does not displace the designed event of a conforming client. On the bound part alone, the
chosen comparison's numerator gets its one-sided Clopper-Pearson lower bound and its
denominator the upper bound, each at level ``alpha / 2``, and ``epsilon_lb = max(0, ln(lower
/ upper))``: one event is bounded, on reports it was not chosen with, so ``alpha`` is split
over the two proportions only (Bonferroni), not over events. Counts over reports of
different success probabilities (the pooled comparison, or one-bit reports whose column is
set by the collector) are Poisson-binomial; the binomial's tails dominate theirs beyond the
mean (Hoeffding 1956, Theorem 4), so the Clopper-Pearson bounds keep their level
(``tests/core/test_audit.py`` checks this exactly). The pooled comparison needs equal sample
sizes: both samples are cut to ``min(n, n')``.

Conformance. Separately, every cell count is compared with the claimed oracle's law (given
the report's design fields: OLH's hash collision, the one-bit column) by a two-sided
Clopper-Pearson interval at level ``alpha`` split (Bonferroni) over the tests. A client can
be ``epsilon``-LDP and still not be the oracle it claims (OUE with ``p`` and ``q`` swapped
is exactly ``epsilon``-LDP, and its estimates are wrong); conformance finds that.

Resolution. :func:`resolution` is the bound at the expected counts of the claimed oracle:
what the audit resolves with ``n`` reports, and the delta-method standard deviation of
``epsilon_lb`` around it.

References: Clopper and Pearson, Biometrika 26 (1934); Hoeffding, "On the distribution of
the number of successes in independent trials", Ann. Math. Statist. 27 (1956); Jagielski,
Ullman, Oprea, "Auditing differentially private machine learning", NeurIPS 2020 (the
Clopper-Pearson audit).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ldpflow.core import hashing, randomness, validation
from ldpflow.core.oracles import pgr
from ldpflow.core.oracles.base import FrequencyOracle, Reports
from ldpflow.core.oracles.registry import ORACLES

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_SELECTION_FRACTION",
    "MAX_RAW_OUTPUTS",
    "ALTERNATIVE_PENALTY",
    "AUDITED_ORACLES",
    "CellMap",
    "cell_map",
    "raw_output_map",
    "clopper_pearson_lower",
    "clopper_pearson_upper",
    "selection_mask",
    "EventBound",
    "ConformanceTest",
    "AuditResult",
    "Auditor",
    "audit_oracle",
    "resolution",
]

DEFAULT_ALPHA = 0.01
DEFAULT_SELECTION_FRACTION = 0.1
#: Oracles whose reports are one index (grr, hr) also get the generic search over their raw
#: outputs when there are at most this many.
MAX_RAW_OUTPUTS = 1 << 16
#: The designed event (the claimed oracle's best pooled event, fixed before any report is
#: seen) is scored by its predicted bound; a searched event by its predicted bound less this
#: many standard deviations of its scoring-part estimate, so that it displaces the designed
#: event only when it is clearly better, not by the luck of a small selection part.
ALTERNATIVE_PENALTY = 4.0
#: Values perturbed at a time by :func:`audit_oracle`.
CHUNK_REPORTS = 1 << 18


# -- Clopper-Pearson ---------------------------------------------------------------------------
def clopper_pearson_lower(hits: npt.ArrayLike, trials: npt.ArrayLike,
                          level: float) -> np.ndarray:
    """The one-sided Clopper-Pearson lower bound of a proportion at ``level`` (exact:
    ``P(bound > p) <= level``): the ``level`` quantile of ``Beta(k, n - k + 1)``, 0 at ``k =
    0``. Non-integer ``hits`` (expected counts) are allowed, for predictions."""
    from scipy import special  # scipy.special only: scipy.stats is slow to import

    k = np.asarray(hits, dtype=float)
    n = np.broadcast_to(np.asarray(trials, dtype=float), k.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = special.betaincinv(np.maximum(k, 1e-300), np.maximum(n - k + 1, 1e-300), level)
    return np.where(k <= 0, 0.0, out)


def clopper_pearson_upper(hits: npt.ArrayLike, trials: npt.ArrayLike,
                          level: float) -> np.ndarray:
    """The one-sided Clopper-Pearson upper bound at ``level``: the ``1 - level`` quantile of
    ``Beta(k + 1, n - k)``, 1 at ``k = n``."""
    from scipy import special

    k = np.asarray(hits, dtype=float)
    n = np.broadcast_to(np.asarray(trials, dtype=float), k.shape)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = special.betaincinv(k + 1, np.maximum(n - k, 1e-300), 1.0 - level)
    return np.where(k >= n, 1.0, out)


def _log_ratio_bound(num_hits: npt.ArrayLike, num_trials: npt.ArrayLike,
                     den_hits: npt.ArrayLike, den_trials: npt.ArrayLike,
                     level: float) -> np.ndarray:
    """``ln(lower(num) / upper(den))`` with both one-sided bounds at ``level`` (-inf for a
    lower bound of 0)."""
    lower = clopper_pearson_lower(num_hits, num_trials, level)
    upper = clopper_pearson_upper(den_hits, den_trials, level)
    with np.errstate(divide="ignore"):
        return np.log(lower) - np.log(upper)


def selection_mask(n: int, fraction: float) -> np.ndarray:
    """Which of ``n`` reports (by position) choose the event: a share ``fraction`` spread
    evenly (report ``i`` when ``floor((i + 1) f) > floor(i f)``), independent of content."""
    i = np.arange(n, dtype=np.float64)
    return np.floor((i + 1) * fraction) > np.floor(i * fraction)


# -- cells ---------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, eq=False)
class CellMap:
    """Reports of an oracle -> cells, for one pair of inputs ``(value, other_value)``.

    Attributes
    ----------
    name : str
        ``reduced`` (the oracle's sufficient statistic for telling ``v`` from ``v'``) or
        ``raw`` (the report's output index itself: grr, hr).
    labels : tuple of str
        One label per cell.
    mirror : ndarray of int or None
        The cell a report would be in with ``v`` and ``v'`` exchanged (an involution); None
        when there is none (raw outputs).
    stratum : ndarray of int
        Each cell's stratum: cells of one stratum share the report's design (OLH: whether
        ``H_s(v) == H_s(v')``; one-bit: the memberships of the column); the claimed law
        gives probabilities within a stratum.
    claimed : ndarray of float, shape (2, cells) or None
        The claimed oracle's probability of each cell given its stratum, for input ``v``
        (row 0) and ``v'`` (row 1); None for raw outputs.
    stratum_probability : ndarray of float, shape (2, strata)
        The strata's probabilities for an ideal client (uniform hash seeds; columns
        assigned uniformly), for :func:`resolution`.
    compute : callable
        ``compute(reports) -> cells`` (int array).
    """

    name: str
    labels: tuple[str, ...]
    mirror: np.ndarray | None
    stratum: np.ndarray
    claimed: np.ndarray | None
    stratum_probability: np.ndarray
    compute: Callable[[Reports], np.ndarray]

    @property
    def num_cells(self) -> int:
        return len(self.labels)

    def cells(self, reports: Reports) -> np.ndarray:
        """The cell of every report (int64)."""
        return np.asarray(self.compute(reports), dtype=np.int64)

    def probabilities(self) -> np.ndarray:
        """The claimed oracle's unconditional cell probabilities for an ideal client, shape
        (2, cells): ``P(stratum) P(cell | stratum)``."""
        if self.claimed is None:
            raise ValueError(f"the {self.name} cell map has no claimed law")
        return self.claimed * self.stratum_probability[:, self.stratum]


def _bit(bits: np.ndarray, position: int) -> np.ndarray:
    return (bits[:, position >> 3] >> np.uint8(position & 7)) & np.uint8(1)


def _pair_cells(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    return first.astype(np.int64) + 2 * second.astype(np.int64)


_PAIR_MIRROR = np.array([0, 2, 1, 3])


def _pair_labels(what: str) -> tuple[str, ...]:
    return (f"{what} neither v nor v'", f"{what} v, not v'", f"{what} v', not v",
            f"{what} both v and v'")


def _pair_law(both: float, v_only: float, other_only: float) -> np.ndarray:
    """Cells (neither, v only, v' only, both) under input v, and mirrored under v'."""
    row = np.array([1.0 - both - v_only - other_only, v_only, other_only, both])
    return np.stack([row, row[_PAIR_MIRROR]])


def _grr_map(oracle: Any, v: int, w: int) -> CellMap:
    p, q, d = oracle.p, oracle.q, oracle.domain_size

    def compute(reports: Reports) -> np.ndarray:
        y = reports.columns["value"]
        return np.where(y == v, 0, np.where(y == w, 1, 2))

    law = np.array([[p, q, (d - 2) * q], [q, p, (d - 2) * q]])
    return CellMap("reduced", ("y = v", "y = v'", "y other"), np.array([1, 0, 2]),
                   np.zeros(3, dtype=np.int64), law, np.ones((2, 1)), compute)


def _unary_map(oracle: Any, v: int, w: int) -> CellMap:
    p, q = oracle.p, oracle.q

    def compute(reports: Reports) -> np.ndarray:
        bits = reports.columns["bits"]
        return _pair_cells(_bit(bits, v), _bit(bits, w))

    return CellMap("reduced", _pair_labels("bits set:"), _PAIR_MIRROR,
                   np.zeros(4, dtype=np.int64), _pair_law(p * q, p * (1 - q), (1 - p) * q),
                   np.ones((2, 1)), compute)


def _subset_map(oracle: Any, v: int, w: int) -> CellMap:
    p, d, omega = oracle.p, oracle.domain_size, oracle.subset_size
    # Given v in the subset, v' is one of the other omega - 1 of the d - 1 values; given v
    # not in it, one of omega (the subset is uniform given whether it holds v).
    law = _pair_law(p * (omega - 1) / (d - 1), p * (d - omega) / (d - 1),
                    (1 - p) * omega / (d - 1))

    def compute(reports: Reports) -> np.ndarray:
        bits = reports.columns["bits"]
        return _pair_cells(_bit(bits, v), _bit(bits, w))

    return CellMap("reduced", _pair_labels("subset holds"), _PAIR_MIRROR,
                   np.zeros(4, dtype=np.int64), law, np.ones((2, 1)), compute)


def _local_hashing_map(oracle: Any, v: int, w: int) -> CellMap:
    p, g, bits = oracle.p, oracle.hash_range, oracle.value_bits
    other = (1 - p) / (g - 1)  # each bucket but H_s(input)

    def compute(reports: Reports) -> np.ndarray:
        seeds, y = reports.columns["seed"], reports.columns["bucket"]
        h = hashing.hash_values(seeds, np.full(seeds.size, v), bits, g)
        h_other = hashing.hash_values(seeds, np.full(seeds.size, w), bits, g)
        return (y == h).astype(np.int64) + 2 * (y == h_other) + 4 * (h == h_other)

    labels = ("y = neither hash", "y = H(v) != H(v')", "y = H(v') != H(v)",
              "(impossible: y = H(v) = H(v'), H(v) != H(v'))",
              "H(v) = H(v') != y", "(impossible 5)", "(impossible 6)", "y = H(v) = H(v')")
    # Given the seed: y = H_s(input) with probability p, else uniform over the other g - 1.
    row_v = np.array([1 - p - other, p, other, 0.0, 1 - p, 0.0, 0.0, p])
    row_w = np.array([1 - p - other, other, p, 0.0, 1 - p, 0.0, 0.0, p])
    strata = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    collide = 1.0 / g  # the hash pair of v != v' is uniform
    return CellMap("reduced", labels, np.array([0, 2, 1, 3, 4, 6, 5, 7]), strata,
                   np.stack([row_v, row_w]), np.array([[1 - collide, collide]] * 2), compute)


def _members(row: int, y: np.ndarray) -> np.ndarray:
    """``H_K[row, y] = +1``: popcount(row & y) even."""
    return (np.bitwise_count(np.asarray(y, dtype=np.int64) & row) & 1) == 0


def _hadamard_map(oracle: Any, v: int, w: int) -> CellMap:
    p = oracle.p  # e / (e + 1): the output is in C_v

    def compute(reports: Reports) -> np.ndarray:
        y = reports.columns["value"]
        return _pair_cells(_members(v + 1, y), _members(w + 1, y))

    # Rows v + 1 and v' + 1 of H_K are orthogonal: half of C_v lies in C_v'.
    return CellMap("reduced", _pair_labels("y in the support set of"), _PAIR_MIRROR,
                   np.zeros(4, dtype=np.int64), _pair_law(p / 2, p / 2, (1 - p) / 2),
                   np.ones((2, 1)), compute)


def _onebit_map(oracle: Any, v: int, w: int) -> CellMap:
    e = oracle.e
    high, low = e / (e + 1), 1 / (e + 1)

    def compute(reports: Reports) -> np.ndarray:
        column, bit = reports.columns["column"], reports.columns["bit"]
        pattern = _pair_cells(_members(v, column), _members(w, column))
        return 2 * pattern + (np.asarray(bit) == 1)

    labels = tuple(f"column holds {holds}, bit {b}"
                   for holds in ("neither v nor v'", "v, not v'", "v', not v", "both v and v'")
                   for b in (0, 1))
    # Pattern s = (v in B) + 2 (v' in B); the bit is 1 with probability e/(e+1) when the
    # input is in B, else 1/(e+1). Input v is in B for s in {1, 3}, input v' for s in {2, 3}.
    rows = []
    for inside in ((False, True, False, True), (False, False, True, True)):
        rows.append([x for s in range(4)
                     for x in (1 - (high if inside[s] else low), high if inside[s] else low)])
    columns = np.arange(oracle.order)
    counts = np.bincount(_pair_cells(_members(v, columns), _members(w, columns)), minlength=4)
    pattern_law = counts / oracle.order  # columns assigned uniformly (j mod K)
    mirror = np.array([2 * _PAIR_MIRROR[s] + b for s in range(4) for b in range(2)])
    return CellMap("reduced", labels, mirror, np.repeat(np.arange(4), 2), np.array(rows),
                   np.stack([pattern_law, pattern_law]), compute)


def _row_bit(bits: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Bit ``positions[i]`` of row ``i`` of little-endian packed ``bits``."""
    positions = np.asarray(positions, dtype=np.int64)
    rows = np.arange(bits.shape[0])
    return (bits[rows, positions >> 3] >> (positions & 7).astype(np.uint8)) & np.uint8(1)


def _sketch_buckets(oracle: Any, x: int) -> np.ndarray:
    """``h_j(x)`` for every hash function ``j`` of a sketch oracle."""
    k = oracle.num_hashes
    return oracle._hash(np.arange(k), np.full(k, x, dtype=np.int64))


def _cms_map(oracle: Any, v: int, w: int) -> CellMap:
    big, small = 1 - oracle.flip, oracle.flip  # P(bit set): the true bucket, another
    table_v, table_w = _sketch_buckets(oracle, v), _sketch_buckets(oracle, w)

    def compute(reports: Reports) -> np.ndarray:
        j, bits = reports.columns["column"], reports.columns["bits"]
        h, h_other = table_v[j], table_w[j]
        pair = _pair_cells(_row_bit(bits, h), _row_bit(bits, h_other))
        # A column whose hashes collide cannot tell v from v': its bit is cell 4 or 5.
        return np.where(h == h_other, 4 + _row_bit(bits, h).astype(np.int64), pair)

    labels = (*_pair_labels("column separates v and v', bits set:"),
              "column hashes v and v' together, bit not set",
              "column hashes v and v' together, bit set")
    # Given a separating column: bit h_j(input) is set w.p. 1 - flip, the other one w.p.
    # flip, independently; "v, not v'" has ratio ((1 - flip)/flip)^2 = e^epsilon.
    separating = _pair_law(big * small, big * (1 - small), (1 - big) * small)
    collide = np.array([1 - big, big])
    claimed = np.concatenate([separating, np.stack([collide, collide])], axis=1)
    share = float(np.mean(table_v == table_w))  # j uniform over the k public functions
    return CellMap("reduced", labels, np.array([0, 2, 1, 3, 4, 5]),
                   np.array([0, 0, 0, 0, 1, 1]), claimed,
                   np.array([[1 - share, share]] * 2), compute)


def _hcms_map(oracle: Any, v: int, w: int) -> CellMap:
    high = oracle.e / (oracle.e + 1)  # the reported sign is H_m[h_j(input), l]
    table_v, table_w = _sketch_buckets(oracle, v), _sketch_buckets(oracle, w)

    def compute(reports: Reports) -> np.ndarray:
        j, index, bit = (reports.columns[name] for name in ("column", "value", "bit"))
        # bit 1 is the sign +1: bit = 1 - parity(h & l) when the sign is kept
        sign_v = 1 - (np.bitwise_count(table_v[j] & index) & 1)
        sign_w = 1 - (np.bitwise_count(table_w[j] & index) & 1)
        bit = np.asarray(bit, dtype=np.int64)
        return np.where(sign_v != sign_w, np.where(bit == sign_v, 0, 1),
                        np.where(bit == sign_v, 3, 2))

    labels = ("(j, l) separates v and v', the bit points to v",
              "(j, l) separates v and v', the bit points to v'",
              "(j, l) does not separate v and v', the bit is the opposite sign",
              "(j, l) does not separate v and v', the bit is their common sign")
    claimed = np.array([[high, 1 - high, 1 - high, high], [1 - high, high, 1 - high, high]])
    # Rows h != h' of H_m differ in half of the columns l (l uniform); equal rows in none.
    share = float(np.mean(table_v != table_w)) / 2
    return CellMap("reduced", labels, np.array([1, 0, 2, 3]), np.array([0, 0, 1, 1]),
                   claimed, np.array([[share, 1 - share]] * 2), compute)


def _pgr_map(oracle: Any, v: int, w: int) -> CellMap:
    q, t = oracle.geometry
    K, h, h2, _, _ = pgr.geometry_constants(q, t, oracle.epsilon)
    points = pgr._digits(pgr.vector_codes(np.array([v, w]), q, t), q, t)

    def compute(reports: Reports) -> np.ndarray:
        planes = pgr._digits(pgr.vector_codes(reports.columns["value"], q, t), q, t)
        incidence = (planes @ points.T) % q == 0  # <u, x> = 0: the hyperplane holds x
        return _pair_cells(incidence[:, 0], incidence[:, 1])

    # P(y | x) = e/Z for the h hyperplanes through x, 1/Z for the others; h2 of them go
    # through both points. "v, not v'" has (h - h2) e/Z against (h - h2)/Z: e^epsilon.
    e = oracle.e
    z = h * e + K - h
    law = _pair_law(h2 * e / z, (h - h2) * e / z, (h - h2) / z)
    return CellMap("reduced", _pair_labels("hyperplane holds"), _PAIR_MIRROR,
                   np.zeros(4, dtype=np.int64), law, np.ones((2, 1)), compute)


#: The cell maps by the ``audit_cells`` an oracle class declares (its report form): the
#: audit knows the events of the oracles whose class names one of these.
_CELL_MAPS: dict[str, Callable[[Any, int, int], CellMap]] = {
    "grr": _grr_map,
    "unary": _unary_map,
    "subset": _subset_map,
    "local_hashing": _local_hashing_map,
    "hadamard": _hadamard_map,
    "onebit": _onebit_map,
    "cms": _cms_map,
    "hcms": _hcms_map,
    "pgr": _pgr_map,
}
#: The registry keys the audit knows the events of (registration order).
AUDITED_ORACLES: tuple[str, ...] = tuple(
    name for name, cls in ORACLES.items() if cls.audit_cells in _CELL_MAPS)


def _check_pair(oracle: FrequencyOracle, value: int, other_value: int) -> tuple[int, int]:
    if not isinstance(oracle, FrequencyOracle):
        raise TypeError(f"oracle must be a FrequencyOracle, got {type(oracle).__name__}")
    if oracle.audit_cells not in _CELL_MAPS:
        raise ValueError(f"oracle must be one of {' '.join(AUDITED_ORACLES)}, got "
                         f"{oracle.name!r}")
    pair = []
    for name, x in (("value", value), ("other_value", other_value)):
        if not 0 <= validation.check_integer(x, name=name) < oracle.domain_size:
            raise ValueError(f"{name} must be in [0, {oracle.domain_size}), got {x!r}")
        pair.append(int(x))
    if pair[0] == pair[1]:
        raise ValueError(f"value and other_value must differ, got {pair[0]} twice")
    return pair[0], pair[1]


def cell_map(oracle: FrequencyOracle, value: int, other_value: int) -> CellMap:
    """The reduced cells of ``oracle``'s reports for the inputs ``(value, other_value)``."""
    v, w = _check_pair(oracle, value, other_value)
    return _CELL_MAPS[oracle.audit_cells](oracle, v, w)  # type: ignore[index]


def raw_output_map(oracle: FrequencyOracle) -> CellMap | None:
    """The generic search's cells: the output index of grr and hr reports (at most
    :data:`MAX_RAW_OUTPUTS` of them); None for other oracles."""
    if not oracle.audit_raw_outputs:
        return None
    size = int(oracle.index_range)  # type: ignore[attr-defined]
    if size > MAX_RAW_OUTPUTS:
        return None

    def compute(reports: Reports) -> np.ndarray:
        return reports.columns["value"]

    return CellMap("raw", tuple(f"y = {y}" for y in range(size)), None,
                   np.zeros(size, dtype=np.int64), None, np.ones((2, 1)), compute)


# -- results ------------------------------------------------------------------------------------
_COMPARISONS = {
    "forward": "P(S | v) / P(S | v')",
    "backward": "P(S | v') / P(S | v)",
    "pooled": "(P(S | v) + P(mS | v')) / (P(S | v') + P(mS | v))",
}


@dataclasses.dataclass(frozen=True)
class EventBound:
    """One event's counts and bounds on one part of the data.

    ``numerator_hits`` of ``numerator_trials`` estimate the comparison's numerator
    probability, ``denominator_*`` its denominator; ``lower`` and ``upper`` are their
    one-sided Clopper-Pearson bounds at ``level`` each; ``log_ratio_bound = ln(lower /
    upper)`` and ``log_ratio_estimate`` the plug-in ``ln`` of the ratio of proportions.
    """

    cell_map: str
    comparison: str
    cells: tuple[int, ...]
    labels: tuple[str, ...]
    numerator_hits: int
    numerator_trials: int
    denominator_hits: int
    denominator_trials: int
    level: float
    lower: float
    upper: float

    @property
    def log_ratio_bound(self) -> float:
        if self.lower <= 0:
            return -math.inf
        return math.log(self.lower) - math.log(self.upper)

    @property
    def log_ratio_estimate(self) -> float:
        a = self.numerator_hits / self.numerator_trials
        b = self.denominator_hits / self.denominator_trials
        if a <= 0:
            return -math.inf
        return math.inf if b <= 0 else math.log(a / b)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell_map": self.cell_map,
            "comparison": self.comparison,
            "ratio": _COMPARISONS[self.comparison],
            "cells": list(self.cells),
            "labels": list(self.labels) if len(self.labels) <= 16
            else [*self.labels[:8], f"... ({len(self.labels)} cells)"],
            "numerator": {"hits": self.numerator_hits, "trials": self.numerator_trials,
                          "lower_bound": self.lower},
            "denominator": {"hits": self.denominator_hits, "trials": self.denominator_trials,
                            "upper_bound": self.upper},
            "level_each": self.level,
            "log_ratio_bound": _finite(self.log_ratio_bound),
            "log_ratio_estimate": _finite(self.log_ratio_estimate),
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclasses.dataclass(frozen=True)
class ConformanceTest:
    """One cell count against the claimed law: ``hits`` of ``trials`` reports of its stratum
    (``input`` 0: ``v``, 1: ``v'``); ``claimed`` must lie in ``[lower, upper]``."""

    input: int
    cell: int
    label: str
    hits: int
    trials: int
    claimed: float
    lower: float
    upper: float

    @property
    def ok(self) -> bool:
        return self.lower <= self.claimed <= self.upper

    def to_json(self) -> dict[str, Any]:
        return {"input": ("value", "other_value")[self.input], "cell": self.cell,
                "label": self.label, "hits": self.hits, "trials": self.trials,
                "claimed": self.claimed, "lower": self.lower, "upper": self.upper,
                "ok": self.ok}


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """The outcome of an audit.

    Attributes
    ----------
    epsilon_lower_bound : float
        ``max(0, selected.log_ratio_bound)``: a lower bound on the client's epsilon with
        probability >= ``1 - alpha``.
    selected : EventBound
        The chosen event, counted and bounded on the bound part.
    candidates : list of dict
        The candidates' selection-part counts and predicted bounds, best first.
    tables : dict
        Per cell map, the cell counts of each input on each part.
    conformance : list of ConformanceTest
        The claimed-law tests (reduced cells, all reports), at ``alpha`` over all of them.
    """

    oracle: str
    parameters: dict[str, Any]
    claimed_epsilon: float
    value: int
    other_value: int
    alpha: float
    selection_fraction: float
    reports: tuple[int, int]
    used: int
    selection_reports: int
    epsilon_lower_bound: float
    selected: EventBound
    candidates: list[dict[str, Any]]
    tables: dict[str, dict[str, Any]]
    conformance: list[ConformanceTest]

    @property
    def exceeds_claim(self) -> bool:
        """The lower bound exceeds the claimed epsilon: the client is not epsilon-LDP."""
        return self.epsilon_lower_bound > self.claimed_epsilon

    @property
    def conforms(self) -> bool:
        """Every cell count is consistent with the claimed oracle's law."""
        return all(t.ok for t in self.conformance)

    @property
    def gap(self) -> float:
        return self.claimed_epsilon - self.epsilon_lower_bound

    def verdict(self) -> str:
        """One line: FAIL/PASS, the bound against the claim, and conformance."""
        status = "FAIL" if self.exceeds_claim else "PASS"
        relation = ">" if self.exceeds_claim else "<="
        line = (f"{status}: {self.oracle} epsilon lower bound {self.epsilon_lower_bound:.4f} "
                f"{relation} claimed {self.claimed_epsilon:g} (alpha {self.alpha:g}, "
                f"{self.used} reports per value)")
        bad = [t for t in self.conformance if not t.ok]
        if bad:
            which = ("v", "v'")[bad[0].input]
            line += (f"; {len(bad)} of {len(self.conformance)} cell counts contradict the "
                     f"claimed {self.oracle} law (first: {bad[0].label}, input "
                     f"{which}, "
                     f"{bad[0].hits}/{bad[0].trials} vs claimed {bad[0].claimed:.4g})")
        else:
            line += "; reports follow the claimed law"
        return line

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": "fail" if self.exceeds_claim else "pass",
            "conforms": self.conforms,
            "oracle": self.oracle,
            "parameters": self.parameters,
            "claimed_epsilon": self.claimed_epsilon,
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "gap": self.gap,
            "alpha": self.alpha,
            "value": self.value,
            "other_value": self.other_value,
            "n": {"value": self.reports[0], "other_value": self.reports[1],
                  "used_per_value": self.used, "selection_per_value": self.selection_reports,
                  "bound_per_value": self.used - self.selection_reports},
            "method": {
                "selection_fraction": self.selection_fraction,
                "selection": "the designed event (the claimed oracle's best pooled event), "
                             "unless a searched event (prefixes of the cells ranked by "
                             "likelihood ratio, per comparison) beats its predicted bound by "
                             f"{ALTERNATIVE_PENALTY:g} standard deviations on the selection "
                             "part",
                "bound": "one-sided Clopper-Pearson bounds at alpha/2 each, numerator lower "
                         "and denominator upper, on the bound part only",
            },
            "selected_event": self.selected.to_json(),
            "candidates": self.candidates,
            "cell_counts": self.tables,
            "conformance": {"alpha": self.alpha, "ok": self.conforms,
                            "tests": [t.to_json() for t in self.conformance]},
        }


# -- the audit ----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class _Comparison:
    """One comparison's numerator and denominator hits per cell on each part of the data
    (0: ranking, 1: scoring, 2: bound), and the trials per side of each part."""

    name: str
    num: np.ndarray  # (parts, cells)
    den: np.ndarray
    trials: np.ndarray  # (parts,)


def _comparisons(counts: np.ndarray, mirror: np.ndarray | None,
                 trials: np.ndarray) -> list[_Comparison]:
    """``counts[part, input, cell]`` and ``trials[part]`` -> the comparisons' tables."""
    out = [_Comparison("forward", counts[:, 0], counts[:, 1], trials),
           _Comparison("backward", counts[:, 1], counts[:, 0], trials)]
    if mirror is not None:
        out.append(_Comparison("pooled", counts[:, 0] + counts[:, 1][:, mirror],
                               counts[:, 1] + counts[:, 0][:, mirror], 2 * trials))
    return out


def _predict(comparison: _Comparison, cells: np.ndarray,
             level: float) -> tuple[float, float]:
    """The bound of the event ``cells`` predicted at the bound part's size from the scoring
    part, and the scoring part's standard deviation of its log ratio."""
    order, predicted, sd = _prefix_predictions(comparison, cells, level)
    return float(predicted[-1]), float(sd[-1])


def _prefix_predictions(comparison: _Comparison, order: np.ndarray,
                        level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    num, den = comparison.num.astype(float), comparison.den.astype(float)
    t, bound_trials = max(int(comparison.trials[1]), 1), int(comparison.trials[2])
    hits_num, hits_den = np.cumsum(num[1][order]), np.cumsum(den[1][order])
    scale = bound_trials / t
    predicted = _log_ratio_bound(hits_num * scale, bound_trials, hits_den * scale,
                                 bound_trials, level)
    p1, p2 = (hits_num + 0.5) / (t + 1), (hits_den + 0.5) / (t + 1)
    sd = np.sqrt((1 - p1) / (t * p1) + (1 - p2) / (t * p2))
    return order, predicted, sd


def _candidates(comparison: _Comparison, level: float,
                penalty: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The search: cells ranked by their ratio on the ranking part; every prefix's bound
    predicted at the bound part's size from the scoring part, and its score: the prediction
    less ``penalty`` standard deviations of the scoring part's log ratio, or -inf when the
    prediction is not positive. Ranking and scoring on separate reports keeps the luck of
    the ranking out of the scores; the penalty keeps the luck of the scoring from
    displacing the designed event."""
    num, den = comparison.num.astype(float), comparison.den.astype(float)
    ratio = (num[0] + 0.5) / (den[0] + 0.5)
    order = np.lexsort((-num[0], -ratio))  # by ratio, then by mass
    _, predicted, sd = _prefix_predictions(comparison, order, level)
    score = np.where(predicted > 0, predicted - penalty * sd, -np.inf)
    return order, predicted, score


class Auditor:
    """Collects the cells of reports of two inputs and bounds the client's epsilon.

    Parameters
    ----------
    oracle : FrequencyOracle
        The claimed oracle (registry key and parameters as the reports claim them).
    value, other_value : int
        The inputs ``v`` and ``v'`` the reports were made from (distinct).
    alpha : float
        The bound fails with probability at most ``alpha`` (default 0.01).
    selection_fraction : float
        The share of each sample's reports that chooses the event (default 0.1).

    Reports are added a batch at a time (:meth:`add`, ``input`` 0 for ``v``, 1 for ``v'``);
    only their cells are kept (one int per report), so memory is that of one batch.
    """

    def __init__(self, oracle: FrequencyOracle, value: int, other_value: int, *,
                 alpha: float = DEFAULT_ALPHA,
                 selection_fraction: float = DEFAULT_SELECTION_FRACTION):
        self.value, self.other_value = _check_pair(oracle, value, other_value)
        self.oracle = oracle
        self.alpha = validation.check_probability(alpha, name="alpha", open_interval=True)
        self.selection_fraction = validation.check_probability(
            selection_fraction, name="selection_fraction", open_interval=True)
        self.maps = [m for m in (cell_map(oracle, value, other_value), raw_output_map(oracle))
                     if m is not None]
        self._cells: list[list[list[np.ndarray]]] = [[[], []] for _ in self.maps]

    def add(self, input: int, reports: Reports) -> None:
        """Add a batch of reports of ``value`` (``input=0``) or ``other_value`` (1)."""
        if input not in (0, 1):
            raise ValueError(f"input must be 0 (value) or 1 (other_value), got {input!r}")
        if not isinstance(reports, Reports):
            raise TypeError(f"reports must be Reports, got {type(reports).__name__}")
        if reports.oracle != self.oracle.name:
            raise ValueError(f"reports of oracle {reports.oracle!r} given to an audit of "
                             f"{self.oracle.name!r}")
        reports = self.oracle.coerce_reports(reports)  # columns, shapes and dtypes
        for store, cmap in zip(self._cells, self.maps, strict=True):
            cells = cmap.cells(reports)
            store[input].append(cells.astype(np.min_scalar_type(max(cmap.num_cells - 1, 1))))

    def counts(self) -> tuple[int, int]:
        """The number of reports added for ``value`` and ``other_value``."""
        return tuple(sum(c.size for c in self._cells[0][i]) for i in (0, 1))  # type: ignore[return-value]

    def result(self) -> AuditResult:
        """The audit of the reports added so far (at least 20 per input)."""
        n_v, n_w = self.counts()
        n = min(n_v, n_w)
        if n < 20:
            raise ValueError(f"an audit needs at least 20 reports of each input, got {n_v} of "
                             f"value {self.value} and {n_w} of other_value {self.other_value}")
        select = selection_mask(n, self.selection_fraction)
        # The selection part alternates between ranking and scoring reports.
        part = np.full(n, 2, dtype=np.int64)
        chosen_rows = np.flatnonzero(select)
        part[chosen_rows] = np.arange(chosen_rows.size) % 2
        trials = np.bincount(part, minlength=3)
        n_sel = int(trials[0] + trials[1])
        if trials.min() == 0:
            raise ValueError(f"selection_fraction {self.selection_fraction} leaves no reports "
                             f"to select with or to bound with at n = {n}")
        level = self.alpha / 2
        designed = _designed_event(self.maps[0], int(trials[2]), level)
        best: tuple[tuple[int, float], _Comparison, np.ndarray, CellMap] | None = None
        candidates: list[dict[str, Any]] = []
        tables: dict[str, dict[str, Any]] = {}
        full_counts = np.zeros((2, self.maps[0].num_cells), dtype=np.int64)

        def consider(kind: str, comparison: _Comparison, chosen: np.ndarray, cmap: CellMap,
                     predicted: float, score: float) -> None:
            nonlocal best
            # Rank by score when it is finite (a positive prediction), else by prediction.
            key = (1, score) if math.isfinite(score) else (0, predicted)
            if best is None or key > best[0]:
                best = (key, comparison, chosen, cmap)
            candidates.append({
                "kind": kind, "cell_map": cmap.name, "comparison": comparison.name,
                "cells": _cell_list(chosen, cmap),
                "scoring_hits": [int(comparison.num[1][chosen].sum()),
                                 int(comparison.den[1][chosen].sum())],
                "scoring_trials": int(comparison.trials[1]),
                "predicted_bound": _finite(predicted), "score": _finite(score)})

        for store, cmap in zip(self._cells, self.maps, strict=True):
            cells = [np.concatenate(store[i])[:n].astype(np.int64) for i in (0, 1)]
            # counts[part, input, cell], by one bincount per input
            counts = np.stack([np.bincount(part * cmap.num_cells + c,
                                           minlength=3 * cmap.num_cells)
                               .reshape(3, cmap.num_cells) for c in cells], axis=1)
            comparisons = _comparisons(counts, cmap.mirror, trials)
            if cmap.name == "reduced":
                full_counts = counts.sum(axis=0)
                tables[cmap.name] = {"labels": list(cmap.labels),
                                     "selection": counts[:2].sum(axis=0).tolist(),
                                     "bound": counts[2].tolist()}
                pooled = next(c for c in comparisons if c.name == "pooled")
                chosen = np.array(designed["cells"])
                predicted, _ = _predict(pooled, chosen, level)
                consider("designed", pooled, chosen, cmap, predicted,
                         predicted if predicted > 0 else -math.inf)
            for comparison in comparisons:
                order, predicted_all, score = _candidates(comparison, level,
                                                          ALTERNATIVE_PENALTY)
                for j in np.argsort(-score, kind="stable")[:3]:
                    consider("search", comparison, order[: j + 1], cmap,
                             float(predicted_all[j]), float(score[j]))
        if best is None:  # pragma: no cover - there is always the reduced map
            raise RuntimeError("no candidate event")
        _, comparison, chosen, cmap = best
        chosen = np.sort(chosen)
        num_hits = int(comparison.num[2][chosen].sum())
        den_hits = int(comparison.den[2][chosen].sum())
        bound_trials = int(comparison.trials[2])
        selected = EventBound(
            cmap.name, comparison.name, tuple(int(c) for c in chosen),
            tuple(cmap.labels[c] for c in chosen), num_hits, bound_trials, den_hits,
            bound_trials, level, float(clopper_pearson_lower(num_hits, bound_trials, level)),
            float(clopper_pearson_upper(den_hits, bound_trials, level)))
        candidates.sort(key=lambda c: -(c["score"] if c["score"] is not None else -math.inf))
        conformance = _conformance(self.maps[0], full_counts, self.alpha)
        return AuditResult(
            self.oracle.name, dict(self.oracle.parameters), float(self.oracle.epsilon),
            self.value, self.other_value, self.alpha, self.selection_fraction, (n_v, n_w), n,
            n_sel, max(0.0, selected.log_ratio_bound), selected, candidates, tables,
            conformance)


def _cell_list(chosen: np.ndarray, cmap: CellMap) -> list[int] | str:
    cells = sorted(int(c) for c in chosen)
    if len(cells) <= 16:
        return cells
    return f"{len(cells)} cells: {cells[:8]} ..."


def _conformance(cmap: CellMap, counts: np.ndarray, alpha: float) -> list[ConformanceTest]:
    """Every cell count against the claimed law within its stratum (both inputs), two-sided
    Clopper-Pearson at ``alpha`` split over the tests."""
    if cmap.claimed is None:
        return []
    tests = []
    strata = cmap.stratum
    for i in (0, 1):
        stratum_trials = np.bincount(strata, weights=counts[i], minlength=strata.max() + 1)
        for c in range(cmap.num_cells):
            trials = int(stratum_trials[strata[c]])
            if trials:
                tests.append((i, c, int(counts[i][c]), trials, float(cmap.claimed[i][c])))
    level = alpha / (2 * max(len(tests), 1))
    out = []
    for i, c, hits, trials, claimed in tests:
        lower = float(clopper_pearson_lower(hits, trials, level))
        upper = float(clopper_pearson_upper(hits, trials, level))
        out.append(ConformanceTest(i, c, cmap.labels[c], hits, trials, claimed, lower, upper))
    return out


def audit_oracle(
    oracle: FrequencyOracle,
    reports: int,
    value: int = 0,
    other_value: int = 1,
    rng: randomness.RandomSource | np.random.Generator | None = None,
    *,
    alpha: float = DEFAULT_ALPHA,
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
    chunk: int = CHUNK_REPORTS,
    progress: Callable[[int, int], None] | None = None,
) -> AuditResult:
    """Audit ``oracle``'s own perturbation: ``reports`` reports of each input.

    ``rng=None`` perturbs with the OS CSPRNG, as a client does; pass a seeded generator for
    a reproducible audit. Values are perturbed ``chunk`` at a time (one-bit columns:
    report ``j`` of each input in column ``j mod K``). ``progress(done, total)`` is called
    after every chunk.
    """
    n = validation.check_positive_int(reports, name="reports")
    chunk = validation.check_positive_int(chunk, name="chunk")
    auditor = Auditor(oracle, value, other_value, alpha=alpha,
                      selection_fraction=selection_fraction)
    source = randomness.as_source(rng)
    done = 0
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        for which, x in enumerate((auditor.value, auditor.other_value)):
            values = np.full(stop - start, x, dtype=np.int64)
            if oracle.name == "onebit":
                columns = np.arange(start, stop, dtype=np.int64) % oracle.order  # type: ignore[attr-defined]
                batch = oracle.perturb(values, source, columns=columns)  # type: ignore[call-arg]
            else:
                batch = oracle.perturb(values, source)
            auditor.add(which, batch)
            done += stop - start
            if progress is not None:
                progress(done, 2 * n)
    return auditor.result()


def _designed_event(cmap: CellMap, n_bound: int, level: float) -> dict[str, Any]:
    """The pooled event of largest bound at the claimed law's expected counts (``n_bound``
    reports per input), fixed before any report is seen."""
    probs = cmap.probabilities()
    if cmap.mirror is None:  # pragma: no cover - reduced maps have mirrors
        raise ValueError("the designed event needs a mirrored cell map")
    num, den = probs[0] + probs[1][cmap.mirror], probs[1] + probs[0][cmap.mirror]
    trials = 2 * n_bound
    order = np.lexsort((-num, -(num / np.maximum(den, 1e-300))))
    p1, p2 = np.cumsum(num[order]) / 2, np.cumsum(den[order]) / 2
    bound = _log_ratio_bound(p1 * trials, trials, p2 * trials, trials, level)
    k = int(np.argmax(bound))
    cells = np.sort(order[: k + 1])
    sd = math.sqrt((1 - p1[k]) / (trials * p1[k]) + (1 - p2[k]) / (trials * p2[k]))
    return {"expected_bound": float(bound[k]), "comparison": "pooled",
            "cells": [int(c) for c in cells], "labels": [cmap.labels[c] for c in cells],
            "numerator_probability": float(p1[k]), "denominator_probability": float(p2[k]),
            "trials": trials, "sd": sd, "true_log_ratio": float(math.log(p1[k] / p2[k]))}


def resolution(
    oracle: FrequencyOracle,
    reports: int,
    value: int = 0,
    other_value: int = 1,
    *,
    alpha: float = DEFAULT_ALPHA,
    selection_fraction: float = DEFAULT_SELECTION_FRACTION,
) -> dict[str, Any]:
    """What an audit of a conforming client resolves with ``reports`` reports per input.

    The bound of the designed event (the pooled event of largest bound under the claimed
    law; ideal hash seeds, uniform one-bit columns) at its expected counts:
    ``expected_bound`` (``~ E[epsilon_lb]``), ``gap = epsilon - expected_bound``, and ``sd``,
    the delta-method standard deviation of ``epsilon_lb``,
    ``sqrt((1 - P1) / (N P1) + (1 - P2) / (N P2))`` for the event's numerator and
    denominator probabilities ``P1``, ``P2`` over ``N`` trials each.
    """
    n = validation.check_positive_int(reports, name="reports")
    cmap = cell_map(oracle, value, other_value)
    n_bound = n - int(selection_mask(n, selection_fraction).sum())
    best = _designed_event(cmap, n_bound, alpha / 2)
    best["gap"] = float(oracle.epsilon) - best["expected_bound"]
    return best
