"""Batch pipeline benchmark: ``ldpflow estimate`` end to end vs a bare fastavro read loop.

    python benchmarks/pipeline.py [--users 1000000] [--oracles grr,olh] [--workdir DIR]

For each oracle: simulates ``--users`` Avro reports (d = 1024, epsilon = 1, 4 shards), then
times (a) a bare loop that decodes every record of the same files with fastavro and does
nothing else, (b) ``ldpflow estimate`` on the in-process FnApiRunner, and (c) the same on
two worker processes. One JSON object per oracle and mode on stdout (records/s, and the
ratio to the bare read rate).
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import tempfile
import time

import fastavro

from ldpflow.pipelines import estimate, simulate


def bare_read(paths):
    start = time.perf_counter()
    count = 0
    for path in paths:
        with open(path, "rb") as f:
            for _ in fastavro.reader(f):
                count += 1
    return count, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--oracles", default="grr,olh")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or tempfile.mkdtemp(prefix="ldpflow-bench-")
    for name in args.oracles.split(","):
        reports = os.path.join(workdir, f"reports-{name}")
        simulate.run(["--oracle", name, "--epsilon", "1.0", "--domain_size", "1024",
                      "--users", str(args.users), "--seed", "1", "--output", reports,
                      "--shards", "4"])
        paths = sorted(glob.glob(f"{reports}/*.avro"))
        count, read_s = bare_read(paths)
        bare_rate = count / read_s
        print(json.dumps({"oracle": name, "mode": "bare_fastavro_read", "records": count,
                          "seconds": round(read_s, 3), "records_per_s": round(bare_rate)}),
              flush=True)
        modes = {"fnapi_in_process": [],
                 "fnapi_2_workers": ["--direct_num_workers=2",
                                     "--direct_running_mode=multi_processing"]}
        for mode, extra in modes.items():
            start = time.perf_counter()
            doc = estimate.run([f"--input={reports}/*.avro",
                                f"--output={workdir}/estimates-{name}-{mode}",
                                "--methods=base,norm-sub", *extra])
            seconds = time.perf_counter() - start
            n = sum(r["n"] for r in doc["results"])
            print(json.dumps({"oracle": name, "mode": mode, "records": n,
                              "seconds": round(seconds, 3), "records_per_s": round(n / seconds),
                              "ratio_to_bare_read": round(n / seconds / bare_rate, 3)}),
                  flush=True)


if __name__ == "__main__":
    main()
