"""Heavy-hitter identification under local differential privacy, pure NumPy.

One protocol family behind one contract (:class:`HeavyHitterProtocol`, see
:mod:`ldpflow.core.heavy_hitters.base`):

* ``pem`` -- :class:`PrefixExtendingMethod` (Wang, Li, Jha, "Locally Differentially Private
  Heavy Hitter Identification"), with the automatic configuration of
  :func:`~ldpflow.core.heavy_hitters.config.configure`;
* ``spm`` -- :class:`SegmentPairsMethod` and ``mcm`` -- :class:`MultipleChannelMethod`, the
  paper's baselines;
* ``treehist`` -- :class:`TreeHist` (Bassily, Nissim, Stemmer, Thakurta, "Practical Locally
  Private Heavy Hitters");
* ``sfp`` -- :class:`SequenceFragmentPuzzle` (Apple's Differential Privacy Team, "Learning
  with Privacy at Scale").

:data:`PROTOCOLS` maps the keys to the classes (a view of :mod:`ldpflow.core.registry`:
each class registers itself, and every module of this package is imported here, so a new
protocol is one new module) and :func:`make` builds one. Counting
(:mod:`~ldpflow.core.heavy_hitters.counting`), evaluation helpers
(:mod:`~ldpflow.core.heavy_hitters.evaluation`) and the configuration rule
(:mod:`~ldpflow.core.heavy_hitters.config`) are submodules.
"""

from __future__ import annotations

import dataclasses
import importlib as _importlib
import pkgutil as _pkgutil
from typing import Any

from ldpflow.core import registry

# pem and spm first: registration order is import order, and the registry's order
# (pem spm mcm sfp treehist) is that of the --protocol choices and messages.
from ldpflow.core.heavy_hitters import config, counting, evaluation, pem, spm  # noqa: F401
from ldpflow.core.heavy_hitters.base import (
    DEFAULT_GROUP_HASH,
    DEFAULT_QUERY_LIMIT,
    GROUP_HASH_BLAKE2B,
    GROUP_HASH_KEY,
    GROUP_HASH_KEYED,
    GROUP_HASHES,
    MAX_QUERY_LIMIT,
    HeavyHitterProtocol,
    HeavyHitters,
    PassCounts,
    PassFigures,
    PassState,
    assign_groups,
    check_group_hash,
    default_survivors,
    extend_prefixes,
    groups_of_keys,
    heavy_hitter_standard_errors,
    olh_frequencies,
    olh_variance,
    select_survivors,
    select_top,
    shortfall,
    string_keys,
    user_keys,
)
from ldpflow.core.heavy_hitters.config import configure, cost_aware_hash_range
from ldpflow.core.heavy_hitters.evaluation import (
    DISTRIBUTIONS,
    distinct_values,
    rank_probabilities,
    sample_values,
    score_top_k,
    true_top,
)
from ldpflow.core.heavy_hitters.mcm import MultipleChannelMethod
from ldpflow.core.heavy_hitters.pem import (
    COLUMN_SPECS,
    DEFAULT_REFINE_SIGMA,
    NAME,
    PassEstimate,
    PassSurvivors,
    PrefixExtendingMethod,
    combine,
)
from ldpflow.core.heavy_hitters.sfp import SequenceFragmentPuzzle
from ldpflow.core.heavy_hitters.spm import SegmentPairsMethod
from ldpflow.core.heavy_hitters.treehist import TreeHist

__all__ = [
    "NAME",
    "COLUMN_SPECS",
    "DEFAULT_QUERY_LIMIT",
    "MAX_QUERY_LIMIT",
    "DEFAULT_REFINE_SIGMA",
    "HeavyHitterProtocol",
    "HeavyHitters",
    "PrefixExtendingMethod",
    "SegmentPairsMethod",
    "MultipleChannelMethod",
    "TreeHist",
    "SequenceFragmentPuzzle",
    "PassCounts",
    "PassFigures",
    "PassState",
    "PassEstimate",
    "PassSurvivors",
    "combine",
    "GROUP_HASHES",
    "GROUP_HASH_BLAKE2B",
    "GROUP_HASH_KEYED",
    "DEFAULT_GROUP_HASH",
    "GROUP_HASH_KEY",
    "check_group_hash",
    "user_keys",
    "string_keys",
    "groups_of_keys",
    "assign_groups",
    "extend_prefixes",
    "select_top",
    "select_survivors",
    "shortfall",
    "default_survivors",
    "olh_frequencies",
    "olh_variance",
    "heavy_hitter_standard_errors",
    "configure",
    "cost_aware_hash_range",
    "DISTRIBUTIONS",
    "rank_probabilities",
    "distinct_values",
    "sample_values",
    "true_top",
    "score_top_k",
    "PROTOCOLS",
    "COMMON_PARAMETERS",
    "SHAPE_FLAGS",
    "make",
    "shape_parameters",
    "config",
    "counting",
    "evaluation",
]

for _module in _pkgutil.iter_modules(__path__):  # modules not named above: new protocols
    _importlib.import_module(f"{__name__}.{_module.name}")

#: The heavy-hitter protocols by registry key (a live view of the registry's heavy-hitter
#: family; each class registers itself).
PROTOCOLS: registry.Protocols = registry.Protocols(registry.HEAVY_HITTER)


#: The parameters every protocol has; the others are its *shape* parameters.
COMMON_PARAMETERS = ("top_k", "value_bits", "epsilon")


def shape_parameters(name: str) -> tuple[str, ...]:
    """The parameters of protocol ``name`` besides :data:`COMMON_PARAMETERS` (PEM's
    ``query_limit``, ``start_bits``, ...), in declaration order: the flags that configure it
    in ``ldpflow simulate`` and ``ldpflow heavy-hitters``. ``group_hash`` is none (a client's
    version of the group mapping, not a parameter)."""
    cls: Any = registry.lookup(name, registry.HEAVY_HITTER)
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.name not in COMMON_PARAMETERS and f.name != "group_hash")


#: Every shape parameter of any protocol.
SHAPE_FLAGS = frozenset(p for name in PROTOCOLS for p in shape_parameters(name))


def make(name: str, **parameters: Any) -> HeavyHitterProtocol:
    """The protocol ``name`` (a key of :data:`PROTOCOLS`) with ``parameters``."""
    return registry.make(name, registry.HEAVY_HITTER, **parameters)
