"""The operations every engine implements, and the in-process one.

Modelled on PipelineDP's ``pipeline_backend.py``: a job plan (:mod:`ldpflow.plan.job`) is
written once against this small set of operations over an engine's distributed collection
(a list here, a Dask bag, a Spark RDD), and each engine is a thin adapter:

* :meth:`Backend.parallelize`: a driver list -> a collection, one element a partition;
* :meth:`Backend.flat_map`: apply a function to every element (a map over partitions);
* :meth:`Backend.group_by_key`: a shuffle of ``(int key, value)`` pairs -> ``(key, [values])``;
* :meth:`Backend.combine_per_key`: ``(key, value)`` pairs reduced per key by a pure,
  associative, commutative ``add`` (combined where they are, then shuffled);
* :meth:`Backend.union`: the elements of two collections;
* :meth:`Backend.collect`: a collection -> a driver list (:meth:`Backend.collect_all`:
  several at once, in one job where the engine can);
* :meth:`Backend.persist`: keep a collection's elements where they are, for several uses.

Shuffle keys are integers (:func:`ldpflow.plan.steps.shuffle_key`): engines partition by
``hash()``, which differs between processes for strings. Functions handed to an engine
are module-level or ``functools.partial`` of them, so they pickle.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Backend", "LocalBackend"]


class Backend(abc.ABC):
    """An engine: the operations the job plan uses."""

    #: The engine's name, as ``--engine`` spells it.
    name: str = ""

    @property
    def description(self) -> str:
        """What ran the job, for the run's metadata (``run.runner``)."""
        return self.name

    @abc.abstractmethod
    def parallelize(self, items: list) -> Any:
        """A collection of ``items``, each its own partition (a read task each)."""

    @abc.abstractmethod
    def flat_map(self, collection: Any, fn: Callable[[Any], Iterable]) -> Any:
        """The elements ``fn(x)`` yields for every element ``x``."""

    @abc.abstractmethod
    def group_by_key(self, collection: Any) -> Any:
        """``(int key, value)`` pairs -> ``(key, list of values)``, one element a key."""

    @abc.abstractmethod
    def combine_per_key(self, collection: Any, add: Callable[[Any, Any], Any]) -> Any:
        """``(key, value)`` pairs -> ``(key, add(...add(v1, v2)..., vn))``; ``add`` is pure."""

    @abc.abstractmethod
    def collect(self, collection: Any) -> list:
        """The collection's elements, on the driver."""

    def collect_all(self, *collections: Any) -> tuple[list, ...]:
        """The elements of each collection, on the driver (default: one after the other;
        an engine that can computes them in one job, sharing what they have in common)."""
        return tuple(self.collect(collection) for collection in collections)

    @abc.abstractmethod
    def union(self, first: Any, second: Any) -> Any:
        """The elements of both collections."""

    @property
    def parallelism(self) -> int:
        """How many tasks the engine runs at once (default 1)."""
        return 1

    def persist(self, collection: Any) -> Any:
        """The collection, computed once and kept for several uses (default: as it is)."""
        return collection

    def release(self, collection: Any) -> None:
        """Forget a persisted collection (default: nothing to forget)."""
        return None

    def map(self, collection: Any, fn: Callable[[Any], Any]) -> Any:
        return self.flat_map(collection, functools.partial(_one, fn))

    def close(self) -> None:
        """Stop what the backend started (clusters, contexts; default: nothing)."""
        return None

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _one(fn, x):
    return [fn(x)]


class LocalBackend(Backend):
    """In-process: collections are lists (tests, and small inputs on one core)."""

    name = "local"

    def parallelize(self, items: list) -> list:
        return list(items)

    def flat_map(self, collection: list, fn) -> list:
        return [y for x in collection for y in fn(x)]

    def group_by_key(self, collection: list) -> list:
        groups: dict[int, list] = {}
        for key, value in collection:
            groups.setdefault(key, []).append(value)
        return list(groups.items())

    def combine_per_key(self, collection: list, add) -> list:
        out: dict[Any, Any] = {}
        for key, value in collection:
            out[key] = add(out[key], value) if key in out else value
        return list(out.items())

    def union(self, first: list, second: list) -> list:
        return list(first) + list(second)

    def collect(self, collection: list) -> list:
        return list(collection)
