"""Test tiers: every test that runs no Beam pipeline, needs no emulator and is not marked
``slow`` is also marked ``quick``, so ``./dev test -m quick`` runs the quick tier and
``./dev test`` everything."""

import pytest

_FULL_TIER = {"pipeline", "pubsub", "slow"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if not _FULL_TIER & {mark.name for mark in item.iter_markers()}:
            item.add_marker(pytest.mark.quick)
