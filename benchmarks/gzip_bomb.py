"""Peak memory of ``ldpflow estimate`` on a small .json.gz that expands to gigabytes.

    python benchmarks/gzip_bomb.py [--expanded_gb 2.2] [--workdir /tmp/ldpflow-bomb]

Writes one report line repeated until ``--expanded_gb`` GB (gzip level 6: about 8.5 MB for
2.2 GB), runs ``ldpflow estimate --dedup none`` on it in a subprocess and prints one JSON
object: compressed_bytes, expanded_bytes, records, seconds, peak_rss_mb (the child's
``ru_maxrss``) and the exit status. The read decompresses in bounded steps
(``ldpflow.wire.formats.decompressed``): the peak does not grow with the expanded size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

import ldpflow
from ldpflow.wire import formats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expanded_gb", type=float, default=2.2)
    parser.add_argument("--workdir", default="/tmp/ldpflow-bomb")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    oracle = ldpflow.oracle("olh", epsilon=1.0, domain_size=64)
    reports = oracle.perturb(np.array([3]), rng=np.random.default_rng(0))
    line = formats.json_lines(formats.reports_table(oracle, reports, ["r-0"], ["u-0"], [0]))
    block = line * ((8 << 20) // len(line) + 1)
    path = os.path.join(args.workdir, "bomb.jsonl.gz")
    target, written = int(args.expanded_gb * 1e9), 0
    with gzip.open(path, "wb", compresslevel=6) as f:
        while written < target:
            f.write(block)
            written += len(block)
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "ldpflow.pipelines.cli", "estimate",
                           "--input", path, "--output", os.path.join(args.workdir, "out"),
                           "--dedup", "none"], capture_output=True, text=True)
    seconds = time.time() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(json.dumps({"compressed_bytes": os.path.getsize(path), "expanded_bytes": written,
                      "records": written // len(line), "seconds": round(seconds, 1),
                      "peak_rss_mb": round(peak), "exit_status": done.returncode}))


if __name__ == "__main__":
    main()
