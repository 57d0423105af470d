"""``ldpflow simulate --oracle onebit``: users fill the columns j mod K over the whole
population, whatever the number of shards and chunks."""

from __future__ import annotations

import glob

import fastavro
import numpy as np

from ldpflow.pipelines import simulate


def test_columns_are_j_mod_k_across_shards(tmp_path):
    """256 users in 4 shards of 64 at d = 64 (K = 128): every column holds exactly two
    users. Columns numbered within each shard would fill only columns 0..63."""
    out = tmp_path / "reports"
    simulate.run(["--oracle", "onebit", "--epsilon", "1.0", "--domain_size", "64",
                  "--users", "256", "--seed", "3", "--shards", "4", "--output", str(out)])
    columns = []
    for path in sorted(glob.glob(f"{out}/reports-*")):
        with open(path, "rb") as f:
            columns += [r["column"] for r in fastavro.reader(f)]
    np.testing.assert_array_equal(np.bincount(columns, minlength=128), np.full(128, 2))
