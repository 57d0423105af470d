"""Subset selection (SS; Ye and Barg, Wang et al. 2016)."""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from ldpflow.core import bitvectors, randomness
from ldpflow.core.oracles.base import BitmapReports, FrequencyOracle, Reports

__all__ = ["SubsetSelection"]

# The fill rate of the first draw is rounded to this many binary digits: any rate gives an
# exactly uniform subset (see _perturb), a short expansion makes the draw cheap.
_RATE_DIGITS = 8
_FIX_ROWS = 1 << 16


@functools.lru_cache(maxsize=64)
def _fill_rate(domain_size: int, subset_size: int) -> float:
    """The first draw's rate (``_RATE_DIGITS`` binary digits) that minimises the expected
    number of fix-up draws: a surplus ``s`` costs about ``s / (share of members)`` draws, a
    shortfall ``s / (share of non-members)``, so the best rate sits a little below
    ``omega / d``."""
    others = domain_size - 1
    counts = np.arange(others + 1)
    grid = np.arange(1, 2**_RATE_DIGITS) / 2**_RATE_DIGITS
    centre = subset_size / domain_size
    candidates = grid[np.abs(grid - centre) <= 0.1]
    if candidates.size == 0:
        candidates = grid[[np.argmin(np.abs(grid - centre))]]
    surplus = counts - subset_size
    midpoint = np.clip(counts - surplus / 2, 0.5, others - 0.5) / others
    cost = np.where(surplus > 0, surplus / midpoint, -surplus / (1 - midpoint))
    from scipy import stats  # here, not at import: scipy.stats takes 0.4 s to import

    expected = [float(stats.binom.pmf(counts, others, r) @ cost) for r in candidates]
    return float(candidates[int(np.argmin(expected))])


@dataclasses.dataclass(frozen=True, kw_only=True)
class SubsetSelection(BitmapReports, FrequencyOracle):
    """Subset selection: report a subset of ``omega`` values that holds ``v`` more often.

    ``omega = max(1, round(d/(e+1)))`` (halves round up). With probability
    ``p* = omega e / (omega e + d - omega)`` the subset holds ``v`` and ``omega - 1`` values
    drawn uniformly without replacement from the others; otherwise ``omega`` values from the
    others.

    Notes
    -----
    epsilon-LDP per report: every subset holding ``v`` has probability
    ``e / (omega e + d - omega) / C(d-1, omega-1)``-proportional weight ``e`` against ``1`` for
    a subset without it; the ratio is exactly ``e**epsilon``. Report size (spec):
    ``omega * ceil(log2 d)`` bits as a list of values; the wire form here is the membership
    bitmap, ``ceil(d/8)`` bytes as in unary encoding, with exactly ``omega`` bits set (smaller
    than the list whenever ``omega ceil(log2 d) > d``). Aggregation: column sums. As in
    unary encoding, perturbation and aggregation work in chunks of rows with bounded
    temporaries, and a batch whose packed reports exceed the batch limit is refused.
    ``q* = p*(omega-1)/(d-1) + (1-p*) omega/(d-1)``.
    """

    name = "ss"
    poisoning_family = "subset"
    audit_cells = "subset"
    epsilon: float
    domain_size: int

    @property
    def subset_size(self) -> int:
        """``omega = max(1, round(d / (e + 1)))``, rounding halves up."""
        return max(1, math.floor(self.domain_size / (self.e + 1) + 0.5))

    @property
    def p(self) -> float:
        w, d = self.subset_size, self.domain_size
        return w * self.e / (w * self.e + d - w)

    @property
    def q(self) -> float:
        w, d, p = self.subset_size, self.domain_size, self.p
        return p * (w - 1) / (d - 1) + (1 - p) * w / (d - 1)

    @property
    def report_bits(self) -> int:
        return self.subset_size * max(1, math.ceil(math.log2(self.domain_size)))

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        """Draw the subsets as bitmaps, exactly uniform given whether they hold ``v``.

        Every bit except ``v``'s is first set independently with one common rate; bit ``v`` is
        set with probability ``p*``. Each row is then brought to exactly ``omega`` members: a
        row short of members draws a uniform position of ``D \\ {v}`` and sets it, a row with
        a surplus draws one and clears it, one draw per row and step, until every row holds
        ``omega``. Every step treats the values of ``D \\ {v}`` alike, so the final subset's
        law is invariant under permutations of ``D \\ {v}``; with a fixed size, that law is
        the uniform one.
        """
        n, d, w = values.size, self.domain_size, self.subset_size
        bitvectors.check_batch_bytes(n, d, what=f"{self.name} reports")
        rate = _fill_rate(d, w)
        # Chunks of rows with bounded temporaries, each drawn and fixed in turn (one chunk:
        # the draws of the whole batch, in the order above).
        chunks = bitvectors.row_chunks(n, 8 * -(-d // 64))  # bernoulli_bits' 64-bit words
        out = None if len(chunks) <= 1 else np.empty((n, bitvectors.num_bytes(d)), np.uint8)
        bits = np.zeros((0, bitvectors.num_bytes(d)), np.uint8)
        for part in chunks:
            bits = source.bernoulli_bits(rate, part.stop - part.start, d)
            holds_v = source.bernoulli(self.p, bits.shape[0])
            bitvectors.assign_bits(bits, np.arange(bits.shape[0]), values[part], holds_v)
            self._fix_sizes(bits, values[part], source)
            if out is not None:
                out[part] = bits
        return Reports(self.name, {"bits": bits if out is None else out})

    def _fix_sizes(
        self, bits: np.ndarray, values: np.ndarray, source: randomness.RandomSource
    ) -> None:
        """Bring every row of ``bits`` to exactly ``omega`` members, in place.

        Blocks of rows are fixed while many of their rows are pending (the block stays in
        cache); the long tail of the few rows with the largest surplus is finished for all
        blocks at once, so small arrays do not multiply per-call overhead.
        """
        width = bits.shape[1]
        surplus = bitvectors.row_popcount(bits) - self.subset_size
        flat = bits.reshape(-1)
        tails = []
        for start in range(0, bits.shape[0], _FIX_ROWS):
            rows = start + np.flatnonzero(surplus[start : start + _FIX_ROWS])
            state = (surplus[rows], rows * width, values[rows])
            tails.append(self._fix_steps(flat, *state, source, until=_FIX_ROWS // 64))
        if tails:
            surplus, base, own = (np.concatenate(parts) for parts in zip(*tails, strict=True))
            self._fix_steps(flat, surplus, base, own, source, until=0)

    def _fix_steps(
        self,
        flat: np.ndarray,
        surplus: np.ndarray,
        base: np.ndarray,
        own: np.ndarray,
        source: randomness.RandomSource,
        until: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One draw per pending row and step until at most ``until`` rows are pending."""
        d = self.domain_size
        while surplus.size > until:
            position = source.below(d - 1, surplus.size)
            position += position >= own  # uniform over D \\ {v}
            index = base + (position >> 3)
            mask = np.left_shift(1, position & 7).astype(np.uint8)
            current = flat[index]
            change = ((current & mask) != 0) == (surplus > 0)  # clear a member / set a non-member
            flat[index[change]] = current[change] ^ mask[change]
            surplus[change] -= np.sign(surplus[change])
            keep = surplus != 0
            surplus, base, own = surplus[keep], base[keep], own[keep]
        return surplus, base, own

    def _row_checks(self, reports: Reports) -> list[tuple[np.ndarray, str]]:
        wrong_size = bitvectors.row_popcount(reports.columns["bits"]) != self.subset_size
        return [*super()._row_checks(reports),
                (wrong_size, f"subset does not hold exactly {self.subset_size} values")]
