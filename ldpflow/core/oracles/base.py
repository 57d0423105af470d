"""The contract every frequency oracle follows (``docs/spec/oracles.md``).

An oracle is a frozen, keyword-only dataclass holding its parameters; derived constants are
properties. It is batch first:

* ``perturb(values, rng=None) -> Reports``: one report per value (client side);
* ``aggregate(reports) -> Accumulator``: integer sufficient statistics of a batch;
* ``Accumulator.merge(other)`` (in place) and ``a + b`` (pure): exact, order-free
  combination;
* ``estimate(accumulator) -> Estimate``: raw unbiased frequencies with ``n``, ``p*``, ``q*``
  and ``sigma`` for post-processing;
* ``variance(n, frequency=0.0)``: the analytic variance of one estimated frequency.

Reports are :class:`Reports`: named numpy columns of equal length (the wire form of the
spec), which support ``len()``, slicing and concatenation so a batch can be split across
workers and recombined. ``invalid_rows(reports)`` finds the rows no conforming client could
have produced, with a reason for each; ``aggregate`` refuses them.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt

from ldpflow.core import bitvectors, parallel, randomness, registry, validation
from ldpflow.core.keys import Keyed
from ldpflow.core.validation import InvalidReportError

__all__ = [
    "Reports",
    "Accumulator",
    "Estimate",
    "CheckedReports",
    "FrequencyOracle",
    "IndexReports",
    "BitmapReports",
    "InvalidReportError",
    "as_reports",
]


class Reports:
    """A batch of reports of one oracle: named numpy columns with a common first dimension.

    Parameters
    ----------
    oracle : str
        The registry key of the oracle that produced (or will aggregate) the reports.
    columns : mapping of str to array
        The report fields, each an array whose first dimension is the number of reports.
    """

    __slots__ = ("oracle", "columns")

    def __init__(self, oracle: str, columns: Mapping[str, npt.ArrayLike]):
        cols = {name: np.asarray(col) for name, col in columns.items()}
        lengths = {name: (col.shape[0] if col.ndim else -1) for name, col in cols.items()}
        if len(set(lengths.values())) > 1 or -1 in lengths.values():
            raise InvalidReportError(f"report columns must have one common length, got {lengths}")
        self.oracle = oracle
        self.columns = cols

    def __len__(self) -> int:
        return next(iter(self.columns.values())).shape[0] if self.columns else 0

    def __getitem__(self, index: slice | npt.ArrayLike) -> Reports:
        if isinstance(index, (int, np.integer)):
            index = slice(int(index), int(index) + 1 if int(index) != -1 else None)
        picked: Any = index
        return Reports(self.oracle, {name: col[picked] for name, col in self.columns.items()})

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]  # type: ignore[index]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"Reports({self.oracle!r}, n={len(self)}, columns={sorted(self.columns)})"

    def __getstate__(self) -> tuple[str, dict[str, np.ndarray]]:
        return self.oracle, self.columns

    def __setstate__(self, state: tuple[str, dict[str, np.ndarray]]) -> None:
        self.oracle, self.columns = state

    @classmethod
    def concat(cls, batches: Sequence[Reports]) -> Reports:
        """Concatenate batches of one oracle (at least one batch)."""
        if not batches:
            raise ValueError("batches must hold at least one Reports batch, got none")
        first = batches[0]
        for other in batches[1:]:
            if other.oracle != first.oracle or set(other.columns) != set(first.columns):
                raise InvalidReportError(
                    f"cannot concatenate reports of {other.oracle!r} {sorted(other.columns)} "
                    f"with {first.oracle!r} {sorted(first.columns)}"
                )
        return cls(
            first.oracle,
            {name: np.concatenate([b.columns[name] for b in batches]) for name in first.columns},
        )

    def to_records(self) -> list[dict[str, Any]]:
        """One dict of plain Python values (ints, bytes) per report: the wire form."""
        out: list[dict[str, Any]] = [{} for _ in range(len(self))]
        for name, col in self.columns.items():
            values = [bytes(row) for row in col] if col.ndim == 2 else col.tolist()
            for record, value in zip(out, values, strict=True):
                record[name] = value
        return out


def as_reports(reports: Reports | Mapping[str, npt.ArrayLike], name: str,
               columns: Iterable[str], *, target: str | None = None) -> Reports:
    """``reports`` as a :class:`Reports` of oracle ``name`` with exactly ``columns``.

    Raises ``TypeError`` for something that is neither ``Reports`` nor a mapping of columns,
    and ``InvalidReportError`` for reports of another oracle or with other columns.
    ``target`` names the receiver in the message (default: ``name`` quoted).
    """
    if not isinstance(reports, Reports):
        if not isinstance(reports, Mapping):
            raise TypeError(
                f"reports must be Reports or a mapping of columns, got {type(reports).__name__}"
            )
        reports = Reports(name, reports)
    if reports.oracle != name:
        raise InvalidReportError(
            f"reports of oracle {reports.oracle!r} given to {target or repr(name)}")
    wanted = set(columns)
    if set(reports.columns) != wanted:
        raise InvalidReportError(
            f"{name} reports need columns {sorted(wanted)}, got {sorted(reports.columns)}")
    return reports


@dataclasses.dataclass(eq=False)
class Accumulator:
    """Integer sufficient statistics of a set of reports; merging adds them exactly.

    Attributes
    ----------
    key : tuple
        The oracle and the parameters the counts belong to; only equal keys merge.
    counts : ndarray of int64
        The oracle's counters (see each oracle's ``aggregate``).
    n : int
        The number of reports counted.
    """

    key: tuple
    counts: np.ndarray
    n: int = 0

    def _check_same(self, other: object) -> Accumulator:
        if not isinstance(other, Accumulator):
            raise TypeError(f"can only merge an Accumulator, got {type(other).__name__}")
        if other.key != self.key or other.counts.shape != self.counts.shape:
            raise ValueError(
                f"cannot merge an accumulator of {other.key} into one of {self.key}"
            )
        return other

    def merge(self, other: Accumulator) -> Accumulator:
        """Add ``other`` into this accumulator (mutating only ``self``) and return ``self``.

        Where one result may reach several consumers (a distributed engine's reduce), use
        the pure ``self + other`` instead."""
        self._check_same(other)
        self.counts += other.counts
        self.n += other.n
        return self

    def __add__(self, other: Accumulator) -> Accumulator:
        """A new accumulator of both operands' reports; neither operand changes."""
        self._check_same(other)
        return Accumulator(self.key, self.counts + other.counts, self.n + other.n)

    def __sub__(self, other: Accumulator) -> Accumulator:
        """A new accumulator without the reports of ``other``, which must be counted in
        ``self`` (counts are sums over reports, so ``(a + b) - b == a`` exactly)."""
        self._check_same(other)
        counts, n = self.counts - other.counts, self.n - other.n
        if n < 0:
            raise ValueError(f"cannot take {other.n} reports out of an accumulator of {self.n}")
        return Accumulator(self.key, counts, n)

    def copy(self) -> Accumulator:
        return Accumulator(self.key, self.counts.copy(), self.n)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Accumulator)
            and self.key == other.key
            and self.n == other.n
            and np.array_equal(self.counts, other.counts)
        )

    __hash__ = None  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True, eq=False)
class Estimate:
    """Raw unbiased frequency estimates and what post-processing needs to know about them.

    Attributes
    ----------
    frequencies : ndarray of float64, shape (domain_size,)
        The unbiased estimates ``f~`` (they may be negative and need not sum to one).
    n : int
        The number of reports.
    sigma : float
        The standard deviation of one estimate at true frequency 0, ``sqrt(var_const)``
        (one-bit: with the column-sampling term estimated from the data, see
        ``OneBitHadamard``); ``nan`` when ``n == 0``.
    p, q : float or None
        ``p*`` and ``q*`` of a pure protocol; ``None`` for the one-bit scheme.
    var_const, var_slope : float
        ``Var[f~_v] = var_const + var_slope * f_v`` (exact for pure protocols).
    oracle : str
        The registry key of the oracle.
    parameters : dict
        The oracle's parameters (``epsilon``, ``domain_size``, ...).
    support_counts : ndarray of int64 or None
        ``c_v``, the number of reports supporting each value (pure protocols).
    """

    frequencies: np.ndarray
    n: int
    sigma: float
    p: float | None
    q: float | None
    var_const: float
    var_slope: float
    oracle: str
    parameters: dict
    support_counts: np.ndarray | None = None

    @property
    def domain_size(self) -> int:
        return int(self.frequencies.shape[0])


class CheckedReports(abc.ABC):
    """Report checks shared by every protocol (the frequency oracles and the heavy-hitter
    protocols): a protocol declares its columns (:meth:`_column_specs`) and its row checks
    (:meth:`_row_checks`); this mixin coerces batches, lists the invalid rows with one
    countable reason each, and validates."""

    name: ClassVar[str]
    #: How messages name the receiver of reports.
    _report_target: ClassVar[str] = property(lambda self: repr(self.name))  # type: ignore

    def coerce_reports(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """Check the columns of ``reports`` (name, shape, dtype) and return a ``Reports``."""
        expected = self._column_specs()
        reports = as_reports(reports, self.name, expected, target=self._report_target)
        cols = {}
        for name, (dtype, width) in expected.items():
            col = reports.columns[name]
            want_ndim = 1 if width is None else 2
            if col.ndim != want_ndim or (width is not None and col.shape[1] != width):
                shape = "(n,)" if width is None else f"(n, {width})"
                raise InvalidReportError(
                    f"{self.name} report column {name!r} must have shape {shape}, got {col.shape}"
                )
            if col.dtype.kind not in "iu" and not (col.size == 0):
                raise InvalidReportError(
                    f"{self.name} report column {name!r} must hold integers, got {col.dtype}"
                )
            if dtype is np.uint8 and col.dtype != np.uint8 and col.size and (
                    col.min() < 0 or col.max() > 255):
                raise InvalidReportError(
                    f"{self.name} report column {name!r} must hold bytes (0..255), got values "
                    f"in [{col.min()}, {col.max()}]")
            cols[name] = col.astype(dtype, copy=False)
        return Reports(self.name, cols)

    def invalid_rows(self, reports: Reports | Mapping[str, npt.ArrayLike]
                     ) -> tuple[np.ndarray, list[str]]:
        """Rows of ``reports`` that no conforming client could produce, with a reason each."""
        reports = self.coerce_reports(reports)
        checks = self._row_checks(reports)
        bad = np.zeros(len(reports), dtype=bool)
        reason_index = np.full(len(reports), -1)
        for i, (mask, _) in enumerate(checks):
            new = mask & ~bad
            reason_index[new] = i
            bad |= mask
        rows = np.flatnonzero(bad)
        reasons = [checks[reason_index[r]][1] for r in rows]
        return rows, reasons

    def validate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Reports:
        """Return the coerced reports, or raise ``InvalidReportError`` naming the first bad row."""
        reports = self.coerce_reports(reports)
        rows, reasons = self.invalid_rows(reports)
        if rows.size:
            raise InvalidReportError(
                f"{rows.size} invalid {self.name} report(s); "
                f"first at row {int(rows[0])}: {reasons[0]}"
            )
        return reports

    @abc.abstractmethod
    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        """Column name -> (dtype, width); width None for a 1-d column."""

    @abc.abstractmethod
    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        """(mask of bad rows, reason) pairs, in order of precedence."""


class FrequencyOracle(Keyed, CheckedReports):
    """Base class of the oracles; subclasses are frozen keyword-only dataclasses."""

    #: Registry key (``grr``, ``oue``, ...).
    name: ClassVar[str]
    family: ClassVar[str] = registry.FREQUENCY_ORACLE
    #: How :mod:`ldpflow.core.poisoning` defends the oracle's estimates: ``grr``, ``unary``,
    #: ``subset`` or ``hash`` (the attacks and tests of its report form); None: no defence.
    poisoning_family: ClassVar[str | None] = None
    #: Which cell map of :mod:`ldpflow.core.audit` reduces its reports for a pair of inputs
    #: (``grr``, ``unary``, ``local_hashing``, ...: its report form); None: not audited.
    audit_cells: ClassVar[str | None] = None
    #: Whether the audit's generic search may also count its raw outputs (one index a report).
    audit_raw_outputs: ClassVar[bool] = False
    epsilon: float
    domain_size: int
    _report_target = property(lambda self: f"oracle {self.name!r}")  # type: ignore

    # -- parameters ---------------------------------------------------------------------
    def __post_init__(self) -> None:
        """Validate (and normalise) the parameters every oracle has."""
        object.__setattr__(self, "epsilon", validation.check_epsilon(self.epsilon))
        object.__setattr__(self, "domain_size", validation.check_domain_size(self.domain_size))

    @property
    def e(self) -> float:
        return math.exp(self.epsilon)

    @property
    def p(self) -> float | None:
        """``p*``: the probability that a report supports its true value."""
        return None

    @property
    def q(self) -> float | None:
        """``q*``: the probability that a report supports one given other value."""
        return None

    @property
    @abc.abstractmethod
    def report_bits(self) -> int:
        """The size of one report in bits (spec)."""

    def variance(self, n: int, frequency: float | npt.ArrayLike = 0.0) -> float | np.ndarray:
        """The exact variance of ``f~_v`` about the population's frequency ``f_v = frequency``
        (the contract of ``docs/spec/oracles.md``: the same meaning for every oracle).

        ``Var = q*(1-q*) / (n (p*-q*)^2) + f_v (1-p*-q*) / (n (p*-q*))``; with the default
        ``frequency=0`` it is the dominant term ``sigma^2`` used by post-processing.
        """
        n = validation.check_positive_int(n, name="n")
        const, slope = self._variance_terms(n)
        result = const + slope * np.asarray(frequency, dtype=float)
        return float(result) if result.ndim == 0 else result

    def _variance_terms(self, n: int) -> tuple[float, float]:
        p, q = float(self.p), float(self.q)  # type: ignore[arg-type]  # pure protocols
        return q * (1 - q) / (n * (p - q) ** 2), (1 - p - q) / (n * (p - q))

    # -- client ---------------------------------------------------------------------------
    def perturb(
        self,
        values: npt.ArrayLike,
        rng: randomness.RandomSource | np.random.Generator | None = None,
    ) -> Reports:
        """Perturb a batch of true values into reports (epsilon-LDP per report).

        Parameters
        ----------
        values : array_like of int
            True values in ``[0, domain_size)``.
        rng : None, numpy.random.Generator or RandomSource
            ``None`` (default) draws from the operating system's CSPRNG, as a client must;
            pass a seeded generator for simulation and tests only.
        """
        vals = validation.check_values(values, self.domain_size)
        return self._perturb(vals, randomness.as_source(rng))

    def perturb_one(
        self, value: int, rng: randomness.RandomSource | np.random.Generator | None = None
    ) -> dict[str, Any]:
        """Perturb one value on a device; returns its report as a dict of ints and bytes."""
        return self.perturb(np.array([value]), rng).to_records()[0]

    @abc.abstractmethod
    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports: ...

    # -- server ---------------------------------------------------------------------------
    def empty_reports(self) -> Reports:
        """A batch of zero reports with this oracle's columns."""
        return self.perturb(np.zeros(0, dtype=np.int64), randomness.make_rng(0))

    def create_accumulator(self) -> Accumulator:
        """An empty accumulator for this oracle's parameters."""
        return Accumulator(self.key, np.zeros(self._counts_size(), dtype=np.int64), 0)

    def aggregate(self, reports: Reports | Mapping[str, npt.ArrayLike]) -> Accumulator:
        """Count a batch of reports into a new accumulator (after validating every row)."""
        return self.count_valid(self.validate(reports))

    def count_valid(self, reports: Reports) -> Accumulator:
        """Count a batch whose every row has passed :meth:`invalid_rows` (the wire parse's
        batches), without checking it again; :meth:`aggregate` is the checked form."""
        acc = self.create_accumulator()
        if len(reports):  # large batches: slices counted in threads, summed exactly
            for counts in parallel.map_slices(lambda part: self._count(reports[part]),
                                              len(reports)):
                acc.counts += counts
            acc.n = len(reports)
        return acc

    def estimate(self, accumulator: Accumulator) -> Estimate:
        """Raw unbiased frequency estimates from an accumulator of this oracle."""
        if not isinstance(accumulator, Accumulator):
            raise TypeError(f"accumulator must be an Accumulator, got {type(accumulator).__name__}")
        if accumulator.key != self.key:
            raise ValueError(f"accumulator of {accumulator.key} given to oracle {self.key}")
        n = accumulator.n
        if n == 0:
            nan = np.full(self.domain_size, np.nan)
            return Estimate(nan, 0, math.nan, self.p, self.q, math.nan, math.nan,
                            self.name, self.parameters, None)
        return self._estimate(accumulator)

    def _estimate(self, accumulator: Accumulator) -> Estimate:
        """Pure protocols: ``f~ = (c / n - q*) / (p* - q*)`` from the support counts."""
        p, q = float(self.p), float(self.q)  # type: ignore[arg-type]
        n = accumulator.n
        support = self.support_counts(accumulator)
        freqs = (support / n - q) / (p - q)
        const, slope = self._variance_terms(n)
        return Estimate(freqs, n, math.sqrt(const), p, q, const, slope, self.name,
                        self.parameters, support)

    def support_counts(self, accumulator: Accumulator) -> np.ndarray:
        """``c_v``: how many reports support each value (pure protocols)."""
        return accumulator.counts[: self.domain_size].copy()

    # -- per-oracle hooks -----------------------------------------------------------------
    @abc.abstractmethod
    def _counts_size(self) -> int: ...

    @abc.abstractmethod
    def _count(self, reports: Reports) -> np.ndarray:
        """The int64 counters of a valid, non-empty batch."""


class IndexReports:
    """Mixin: a report is one index ``value`` in ``[0, index_range)``; a histogram counts them.

    The oracle defines the property ``index_range`` (``d`` for GRR, ``K`` for HR).
    """

    if TYPE_CHECKING:

        @property
        def index_range(self) -> int: ...

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"value": (np.int64, None)}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        v = reports.columns["value"]
        return [((v < 0) | (v >= self.index_range), f"value outside [0, {self.index_range})")]

    def _counts_size(self) -> int:
        return self.index_range

    def _count(self, reports: Reports) -> np.ndarray:
        return np.bincount(reports.columns["value"], minlength=self.index_range)


class BitmapReports:
    """Mixin: a report is a ``domain_size``-bit vector (``bits``: packed little-endian bytes,
    padding bits zero); column sums count them (:mod:`ldpflow.core.bitvectors`)."""

    domain_size: int

    def _column_specs(self) -> dict[str, tuple[Any, int | None]]:
        return {"bits": (np.uint8, bitvectors.num_bytes(self.domain_size))}

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        ok = bitvectors.padding_is_zero(reports.columns["bits"], self.domain_size)
        return [(~ok, f"padding bits past bit {self.domain_size} are not zero")]

    def _counts_size(self) -> int:
        return self.domain_size

    def _count(self, reports: Reports) -> np.ndarray:
        return bitvectors.column_sums(reports.columns["bits"], self.domain_size)
