"""Longitudinal clients: memoized randomized response for collection repeated every day.

A device that reports a fresh ε-LDP report every round spends ε per round: after ``r``
rounds, ``r ε``, and averaging its reports reveals its value. Memoization (RAPPOR's
permanent randomized response) bounds the total: the device perturbs each value it holds
once, with budget ``epsilon_permanent`` (ε∞), keeps that *permanent* response, and every
round sends an *instantaneous* perturbation of it. Every report is a function of the
permanent response and fresh noise, so however many reports the server sees, what they
reveal about one value is at most ε∞; a device holding ``k`` distinct values over its
life has spent at most ``k ε∞``.

Two protocols, with ``epsilon`` (ε1) the budget of one report (ε1 < ε∞):

* ``MemoizedUnaryEncoding`` (``rappor``): RAPPOR's scheme on the symmetric unary encoding.
  Permanent bits: SUE at ε∞ (``p1 = e^(ε∞/2)/(e^(ε∞/2)+1)``, ``q1 = 1 - p1``). Instantaneous:
  each bit is kept with probability ``p2`` and flipped otherwise. Spending: ``ε∞`` per
  distinct value.
* ``LongitudinalLocalHashing`` (``loloha``; Arcolezi, Pinzón, Palamidessi, Gambs,
  "Frequency Estimation of Evolving Data Under Local Differential Privacy", EDBT 2023): the
  device draws one hash seed for life and memoizes per *hashed* value ``H_s(v)`` in
  ``[0, g)``. Permanent: ``g``-ary randomized response at ε∞ (``p1 = e^ε∞/(e^ε∞+g-1)``,
  ``q1 = (1-p1)/(g-1)``); instantaneous: ``g``-ary randomized response with keep probability
  ``p2``. Spending: at most ``g ε∞`` for life whatever the values, since there are only
  ``g`` hashed values (``g = 2``, the default, is BiLOLOHA).

The instantaneous step is chosen so that one report is *exactly* as informative as a fresh
report at ε1: both channels are symmetric, and their composition keeps the true symbol (or
bit) with probability ``p1 p2 + q1 (1 - p2)``; setting that to the fresh protocol's ``p``
gives ``p2 = (p - q1) / (p1 - q1)``. So a round's reports are distributed exactly as SUE
(rappor) or OLH with ``hash_range = g`` (loloha) reports at ε1, and the server estimates
them with those oracles (:attr:`Longitudinal.oracle`), with their variance: the pipelines
need nothing else. What differs is only the device, whose state (:class:`LongitudinalClient`)
is one secret: permanent responses are derived from it with SHAKE-256, so they are
reproducible by the device and unpredictable to anyone else.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import math
import os
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ldpflow.core import bitvectors, hashing, randomness, registry, validation
from ldpflow.core.keys import Keyed
from ldpflow.core.oracles.base import FrequencyOracle, Reports
from ldpflow.core.oracles.local_hashing import OptimizedLocalHashing, olh_probabilities
from ldpflow.core.oracles.unary import SymmetricUnaryEncoding

__all__ = [
    "Longitudinal",
    "MemoizedUnaryEncoding",
    "LongitudinalLocalHashing",
    "LongitudinalClient",
    "KeyedSource",
    "simulate_rounds",
    "LONGITUDINAL_PROTOCOLS",
]


class KeyedSource(randomness.RandomSource):
    """Uniform words from SHAKE-256 of a secret and a label: a deterministic,
    cryptographically secure stream (the same secret and label give the same words)."""

    secure = True

    def __init__(self, secret: bytes, label: bytes):
        self._xof = hashlib.shake_256(b"ldpflow-memo-1\x00" + secret + b"\x00" + label)
        self._used = 0

    def words(self, size: int) -> npt.NDArray[np.uint64]:
        end = self._used + 8 * int(size)
        data = self._xof.digest(end)[self._used:end]  # a prefix of one stream
        self._used = end
        return np.frombuffer(data, dtype="<u8").astype(np.uint64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Longitudinal(Keyed, abc.ABC):
    """A memoized protocol: ``epsilon`` per report, ``epsilon_permanent`` per memo."""

    name = ""
    family: ClassVar[str] = registry.LONGITUDINAL
    epsilon: float
    epsilon_permanent: float
    domain_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", validation.check_epsilon(self.epsilon))
        object.__setattr__(self, "epsilon_permanent",
                           validation.check_epsilon(self.epsilon_permanent,
                                                    name="epsilon_permanent"))
        if not self.epsilon < self.epsilon_permanent:
            raise ValueError(f"epsilon ({self.epsilon}) must be smaller than epsilon_permanent "
                             f"({self.epsilon_permanent}): a report cannot reveal more than "
                             "the permanent response it is drawn from")
        validation.check_domain_size(self.domain_size)

    @property
    @abc.abstractmethod
    def oracle(self) -> FrequencyOracle:
        """The fresh-report oracle whose reports one round's reports are distributed as (the
        server estimates with it)."""

    @property
    @abc.abstractmethod
    def permanent_p(self) -> float:
        """``p1``: the permanent response keeps the true symbol (bit)."""

    @property
    @abc.abstractmethod
    def permanent_q(self) -> float:
        """``q1``: the permanent response shows a given other symbol (a 0 bit as 1)."""

    @property
    def instant_p(self) -> float:
        """``p2``: the instantaneous step keeps the permanent symbol (bit)."""
        p1, q1, fresh = self.permanent_p, self.permanent_q, self.oracle.p
        assert fresh is not None  # SUE and OLH are pure protocols
        return (fresh - q1) / (p1 - q1)

    @abc.abstractmethod
    def memo_key(self, value: int, seed: int) -> int:
        """What a permanent response is kept per: the value, or its hash."""

    def lifetime_epsilon(self, memos: int) -> float:
        """The most a device with ``memos`` permanent responses has revealed."""
        return memos * self.epsilon_permanent



@dataclasses.dataclass(frozen=True, kw_only=True)
class MemoizedUnaryEncoding(Longitudinal):
    """RAPPOR's memoization on SUE: reports are SUE reports at ``epsilon``."""

    name = "rappor"
    epsilon: float
    epsilon_permanent: float
    domain_size: int

    @property
    def oracle(self) -> SymmetricUnaryEncoding:
        return SymmetricUnaryEncoding(epsilon=self.epsilon, domain_size=self.domain_size)

    @property
    def permanent_p(self) -> float:
        half = math.exp(self.epsilon_permanent / 2)
        return half / (half + 1.0)

    @property
    def permanent_q(self) -> float:
        return 1.0 - self.permanent_p

    def memo_key(self, value: int, seed: int) -> int:
        return int(value)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LongitudinalLocalHashing(Longitudinal):
    """LOLOHA: memoization per hashed value; reports are OLH reports at ``epsilon`` with
    ``hash_range = g`` and the device's one seed."""

    name = "loloha"
    epsilon: float
    epsilon_permanent: float
    domain_size: int
    hash_range: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "hash_range",
                           validation.check_power_of_two(self.hash_range, name="hash_range"))

    @property
    def oracle(self) -> OptimizedLocalHashing:
        return OptimizedLocalHashing(epsilon=self.epsilon, domain_size=self.domain_size,
                                     hash_range=self.hash_range)

    @property
    def permanent_p(self) -> float:
        return olh_probabilities(self.epsilon_permanent, self.hash_range)[0]

    @property
    def permanent_q(self) -> float:
        return (1.0 - self.permanent_p) / (self.hash_range - 1)

    def memo_key(self, value: int, seed: int) -> int:
        oracle = self.oracle
        return int(hashing.hash_values(np.array([seed], dtype=np.uint64), np.array([value]),
                                       oracle.value_bits, self.hash_range)[0])

    def lifetime_epsilon(self, memos: int) -> float:
        return min(memos, self.hash_range) * self.epsilon_permanent


#: The longitudinal protocols by registry name (a live view of the registry).
LONGITUDINAL_PROTOCOLS: registry.Protocols = registry.Protocols(registry.LONGITUDINAL)


def _symbol_response(keep: np.ndarray, symbols: np.ndarray, other: np.ndarray, g: int
                     ) -> np.ndarray:
    """``g``-ary randomized response: the symbol where ``keep``, else one of the others."""
    return np.where(keep, symbols, (symbols + 1 + other) % g)


class LongitudinalClient:
    """One device's persistent state and reports.

    Parameters
    ----------
    protocol : Longitudinal
    secret : bytes, optional
        The device's secret (32 random bytes from the OS by default). Store it with the
        device: it is the whole state, and the permanent responses follow from it.
    source : RandomSource or numpy Generator, optional
        The instantaneous noise (default: the OS CSPRNG; a seeded source for tests only).
    """

    def __init__(self, protocol: Longitudinal, secret: bytes | None = None, source=None):
        if not isinstance(protocol, Longitudinal):
            raise TypeError(f"protocol must be a Longitudinal protocol, got {protocol!r}")
        if secret is None:
            secret = os.urandom(32)
        if not isinstance(secret, bytes) or len(secret) < 16:
            raise ValueError("secret must be at least 16 bytes")
        self.protocol = protocol
        self._secret = secret
        self._source = randomness.as_source(source)
        self._memos: set[int] = set()
        self.seed = int(KeyedSource(secret, b"seed").words(1)[0])

    @property
    def memos(self) -> int:
        """Permanent responses drawn so far (on this state)."""
        return len(self._memos)

    @property
    def epsilon_spent(self) -> float:
        """The most this device's reports have revealed, whatever the server keeps."""
        return self.protocol.lifetime_epsilon(self.memos)

    def state(self) -> dict[str, Any]:
        """The JSON-safe state to store on the device."""
        return {"protocol": self.protocol.name, "parameters": self.protocol.parameters,
                "secret": self._secret.hex(), "memos": sorted(self._memos)}

    @classmethod
    def from_state(cls, state: dict[str, Any], source=None) -> LongitudinalClient:
        protocol = LONGITUDINAL_PROTOCOLS[state["protocol"]](**state["parameters"])
        client = cls(protocol, bytes.fromhex(state["secret"]), source)
        client._memos = {int(m) for m in state["memos"]}
        return client

    def _memo_source(self, value: int) -> tuple[int, KeyedSource]:
        value = int(validation.check_values(np.array([value]), self.protocol.domain_size)[0])
        key = self.protocol.memo_key(value, self.seed)
        self._memos.add(key)
        return key, KeyedSource(self._secret, b"memo:%d" % key)

    def permanent(self, value: int) -> np.ndarray | int:
        """The permanent response for ``value``: packed bits (rappor) or a bucket (loloha)."""
        protocol = self.protocol
        key, memo = self._memo_source(value)
        p1 = protocol.permanent_p
        if isinstance(protocol, LongitudinalLocalHashing):
            g = protocol.hash_range
            return int(_symbol_response(memo.bernoulli(p1, 1), np.array([key]),
                                        memo.below(g - 1, 1), g)[0])
        bits = memo.bernoulli_bits(protocol.permanent_q, 1, protocol.domain_size)
        bitvectors.assign_bits(bits, np.array([0]), np.array([key]), memo.bernoulli(p1, 1))
        return bits[0]

    def report(self, value: int) -> Reports:
        """This round's report of ``value``: one report of :attr:`Longitudinal.oracle`."""
        protocol = self.protocol
        memo = self.permanent(value)
        p2 = protocol.instant_p
        name = protocol.oracle.name
        if isinstance(protocol, LongitudinalLocalHashing):
            g = protocol.hash_range
            bucket = _symbol_response(self._source.bernoulli(p2, 1), np.array([memo]),
                                      self._source.below(g - 1, 1), g)
            return Reports(name, {"seed": np.array([self.seed], dtype=np.uint64),
                                  "bucket": bucket.astype(np.int64)})
        flips = self._source.bernoulli_bits(1.0 - p2, 1, protocol.domain_size)
        return Reports(name, {"bits": np.bitwise_xor(np.asarray(memo)[None, :], flips)})


def simulate_rounds(protocol: Longitudinal, values: npt.ArrayLike,
                    rng: np.random.Generator) -> list[Reports]:
    """Reports of ``n`` devices over ``r`` rounds (``values``: shape ``(r, n)``), vectorised.

    Each device draws one permanent response per memo key the first time it needs it and
    reuses it after; the instantaneous noise is fresh every round. For simulation and tests
    (a seeded generator; devices use :class:`LongitudinalClient`).
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    values = np.asarray(values)
    if values.ndim != 2:
        raise ValueError(f"values must have shape (rounds, users), got {values.shape}")
    rounds, n = values.shape
    for row in values:
        validation.check_values(row, protocol.domain_size)
    source = randomness.as_source(rng)
    p1, p2 = protocol.permanent_p, protocol.instant_p
    users = np.arange(n)
    out = []
    if isinstance(protocol, LongitudinalLocalHashing):
        oracle = protocol.oracle
        g = protocol.hash_range
        seeds = source.words(n)
        memo = np.full((n, g), -1, dtype=np.int64)
        for row in values:
            keys = hashing.hash_values(seeds, row, oracle.value_bits, g).astype(np.int64)
            new = np.flatnonzero(memo[users, keys] < 0)
            memo[new, keys[new]] = _symbol_response(source.bernoulli(p1, new.size), keys[new],
                                                    source.below(g - 1, new.size), g)
            bucket = _symbol_response(source.bernoulli(p2, n), memo[users, keys],
                                      source.below(g - 1, n), g)
            out.append(Reports(oracle.name, {"seed": seeds, "bucket": bucket}))
        return out
    d = protocol.domain_size
    slots = np.full((n, rounds), -1, dtype=np.int64)  # the values each device memoized
    bits = np.zeros((n, rounds, bitvectors.num_bytes(d)), dtype=np.uint8)
    for row in values:
        found = slots == row[:, None]
        has = found.any(axis=1)
        slot = np.where(has, found.argmax(axis=1), (slots >= 0).sum(axis=1))
        new = np.flatnonzero(~has)
        if new.size:
            fresh = source.bernoulli_bits(protocol.permanent_q, new.size, d)
            bitvectors.assign_bits(fresh, np.arange(new.size), row[new],
                                   source.bernoulli(p1, new.size))
            slots[new, slot[new]] = row[new]
            bits[new, slot[new]] = fresh
        flips = source.bernoulli_bits(1.0 - p2, n, d)
        out.append(Reports(protocol.oracle.name,
                           {"bits": np.bitwise_xor(bits[users, slot], flips)}))
    return out
