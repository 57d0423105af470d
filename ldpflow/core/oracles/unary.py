"""Unary encoding: optimized (OUE) and symmetric (SUE, "basic RAPPOR")."""

from __future__ import annotations

import abc
import dataclasses
import math

import numpy as np
import numpy.typing as npt

from ldpflow.core import bitvectors, randomness
from ldpflow.core.oracles.base import Accumulator, BitmapReports, FrequencyOracle, Reports

__all__ = ["UnaryEncoding", "OptimizedUnaryEncoding", "SymmetricUnaryEncoding"]


class UnaryEncoding(BitmapReports, FrequencyOracle):
    """Shared client, wire form and aggregation of OUE and SUE.

    A report is a ``d``-bit vector sent as ``ceil(d/8)`` bytes, little-endian bit order
    (``numpy.packbits(bitorder="little")``), padding bits zero. Bit ``v`` (the true value) is
    1 with probability ``p``, every other bit with probability ``q``, independently.
    Aggregation: column sums, ``O(n d / 8)``. Perturbation and aggregation work in chunks of
    rows with bounded temporaries (:mod:`ldpflow.core.bitvectors`); a batch whose packed
    reports alone exceed the batch limit is refused with a ``ValueError`` naming its size.
    """

    poisoning_family = "unary"
    audit_cells = "unary"

    epsilon: float
    domain_size: int

    @property
    @abc.abstractmethod
    def p(self) -> float:
        """Probability that the true value's bit is 1."""

    @property
    @abc.abstractmethod
    def q(self) -> float:
        """Probability that any other bit is 1."""

    @property
    def report_bits(self) -> int:
        return self.domain_size

    def _perturb(self, values: np.ndarray, source: randomness.RandomSource) -> Reports:
        """Draw the reports a chunk of rows at a time (each chunk: its Bernoulli(``q``) bits,
        then the ``p`` draws of the true values' bits), so that the temporaries of a batch
        stay within :data:`~ldpflow.core.bitvectors.CHUNK_BYTES` per chunk; the packed output
        itself is refused past :func:`~ldpflow.core.bitvectors.max_batch_bytes`."""
        n, d = values.size, self.domain_size
        bitvectors.check_batch_bytes(n, d, what=f"{self.name} reports")
        chunks = bitvectors.row_chunks(n, 8 * -(-d // 64))  # bernoulli_bits' 64-bit words
        out = None if len(chunks) <= 1 else np.empty((n, bitvectors.num_bytes(d)), np.uint8)
        bits = np.zeros((0, bitvectors.num_bytes(d)), np.uint8)
        for part in chunks:
            bits = source.bernoulli_bits(self.q, part.stop - part.start, d)
            own = source.bernoulli(self.p, bits.shape[0])
            bitvectors.assign_bits(bits, np.arange(bits.shape[0]), values[part], own)
            if out is not None:
                out[part] = bits
        return Reports(self.name, {"bits": bits if out is None else out})

    def sample_accumulator(self, true_counts: npt.ArrayLike,
                           rng: np.random.Generator) -> Accumulator:
        """The accumulator of the reports of a population, drawn at the count level.

        Bit ``v`` of a report is an independent Bernoulli(``p``) if the user holds ``v`` and
        Bernoulli(``q``) otherwise, independently across bits and users, so the column sums
        are independent, ``c_v ~ Binomial(n_v, p) + Binomial(n - n_v, q)``: exactly the law
        of ``aggregate(perturb(values))`` for any ``values`` with these counts, in ``O(d)``.
        For simulation and evaluation only (seeded generator; no reports exist).

        Parameters
        ----------
        true_counts : array_like of int, shape (domain_size,)
            ``n_v``, how many users hold each value (``simulation.true_counts``).
        rng : numpy.random.Generator
            A seeded generator.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        counts = np.asarray(true_counts)
        if counts.shape != (self.domain_size,) or counts.dtype.kind not in "iu" or (
                counts.size and counts.min() < 0):
            raise ValueError(
                f"true_counts must be {self.domain_size} non-negative integers (one per value), "
                f"got shape {counts.shape} and dtype {counts.dtype}")
        counts = counts.astype(np.int64)
        n = int(counts.sum())
        acc = self.create_accumulator()
        acc.counts += rng.binomial(counts, self.p) + rng.binomial(n - counts, self.q)
        acc.n = n
        return acc


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptimizedUnaryEncoding(UnaryEncoding):
    """Optimized unary encoding (OUE): ``p = 1/2``, ``q = 1/(e+1)``.

    Notes
    -----
    epsilon-LDP per report: changing the true value changes two bits, with likelihood ratio
    ``(p(1-q)) / ((1-p)q) = e**epsilon`` exactly. Report ``d`` bits; variance
    ``4e/(n(e-1)^2)`` at ``f = 0`` (Wang et al., USENIX Security 2017, Sec. 4.3).
    """

    name = "oue"
    epsilon: float
    domain_size: int

    @property
    def p(self) -> float:
        return 0.5

    @property
    def q(self) -> float:
        return 1.0 / (self.e + 1.0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SymmetricUnaryEncoding(UnaryEncoding):
    """Symmetric unary encoding (SUE, basic RAPPOR): ``p = e^(eps/2)/(e^(eps/2)+1)``, ``q = 1-p``.

    Notes
    -----
    epsilon-LDP per report: each of the two differing bits contributes a ratio of
    ``e**(epsilon/2)``. Report ``d`` bits (Wang et al., USENIX Security 2017, Sec. 4.2).
    """

    name = "sue"
    epsilon: float
    domain_size: int

    @property
    def p(self) -> float:
        half = math.exp(self.epsilon / 2)
        return half / (half + 1.0)

    @property
    def q(self) -> float:
        return 1.0 / (math.exp(self.epsilon / 2) + 1.0)
