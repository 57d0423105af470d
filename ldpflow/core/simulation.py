"""Synthetic populations for simulation and evaluation (seeded; never for real clients).

A distribution over ranks ``0 .. N-1`` (rank 0 most likely) is named by a short spec:

* ``zipf:S``: ``Pr[r] ~ (r + 1)**-S`` (``S > 0``);
* ``uniform``: ``Pr[r] = 1/N``;
* ``geometric:P``: ``Pr[r] ~ P**r`` (``0 < P < 1``).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import numpy.typing as npt

from ldpflow.core import validation

__all__ = ["RankDistribution", "parse_distribution", "true_counts"]


@dataclasses.dataclass(frozen=True)
class RankDistribution:
    """A named distribution over ranks; ``probabilities(N)`` gives the vector for N ranks."""

    kind: str
    parameter: float | None = None

    def __post_init__(self) -> None:
        if self.kind == "zipf":
            if self.parameter is None or not self.parameter > 0 or math.isinf(self.parameter):
                raise ValueError(
                    f"zipf exponent must be a finite number > 0, got {self.parameter!r}"
                )
        elif self.kind == "geometric":
            if self.parameter is None or not 0 < self.parameter < 1:
                raise ValueError(f"geometric ratio must be in (0, 1), got {self.parameter!r}")
        elif self.kind == "uniform":
            if self.parameter is not None:
                raise ValueError(f"uniform takes no parameter, got {self.parameter!r}")
        else:
            raise ValueError(
                f"distribution must be zipf:S, uniform or geometric:P, got {self.kind!r}"
            )

    @property
    def spec(self) -> str:
        return self.kind if self.parameter is None else f"{self.kind}:{self.parameter:g}"

    def probabilities(self, size: int) -> npt.NDArray[np.float64]:
        size = validation.check_positive_int(size, name="domain_size")
        ranks = np.arange(size, dtype=np.float64)
        if self.kind == "zipf":
            weights = (ranks + 1) ** -float(self.parameter)  # type: ignore[arg-type]
        elif self.kind == "geometric":
            weights = np.exp(ranks * math.log(float(self.parameter)))  # type: ignore[arg-type]
        else:
            weights = np.ones(size)
        return weights / weights.sum()

    def sample(self, size: int, users: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """``users`` i.i.d. ranks in ``[0, size)``."""
        users = validation.check_positive_int(users, name="users", minimum=0)
        cdf = np.cumsum(self.probabilities(size))
        cdf[-1] = 1.0
        return np.minimum(np.searchsorted(cdf, rng.random(users), side="right"), size - 1)


def parse_distribution(spec: str) -> RankDistribution:
    """``"zipf:1.1"``, ``"uniform"`` or ``"geometric:0.98"`` -> :class:`RankDistribution`."""
    if not isinstance(spec, str):
        raise TypeError(f"distribution must be a string, got {type(spec).__name__}")
    kind, _, arg = spec.strip().lower().partition(":")
    try:
        parameter = float(arg) if arg else None
    except ValueError:
        raise ValueError(f"distribution parameter must be a number, got {spec!r}") from None
    return RankDistribution(kind, parameter)


def true_counts(values: npt.ArrayLike, domain_size: int) -> npt.NDArray[np.int64]:
    """How many users hold each value."""
    return np.bincount(validation.check_values(values, domain_size), minlength=domain_size)
