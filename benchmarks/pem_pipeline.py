"""Heavy-hitter pipeline benchmark: ``ldpflow heavy-hitters`` end to end over simulated
reports, for any protocol.

    python benchmarks/pem_pipeline.py [--protocol pem] [--users 1000000] [--bits 64] [--k 32]
                                      [--epsilon 4] [--query_limit Q]
                                      [--num_distinct 100000] [--extra "--step_bits 8"]
                                      [--modes in_process,two_workers] [--workdir DIR]

Simulates ``--users`` reports of ``--protocol`` (Zipf(1.1) over ``--num_distinct``
distinct random ``--bits``-bit values, 4 Avro shards, ``ldpflow simulate``; ``--extra``
adds the protocol's own parameter flags; ``--query_limit`` applies to pem only, whose
configuration is otherwise the automatic one), times a bare
fastavro decode of the same files, then runs ``ldpflow heavy-hitters`` as a fresh process per
mode (so the wall time includes interpreter start-up and imports): ``in_process`` (Beam's
FnApiRunner in one process, the default) and ``two_workers`` (two SDK worker processes).
One JSON object per line on stdout: the simulation, the bare read, one per mode (wall
seconds, the document's own ``elapsed_seconds``, records/s, F1 and NCR against
``truth.json``, whether the 60 s target holds) and one per mode and pass (reports,
candidates, survivors, aggregate / estimate / span seconds). Wall times are of this machine,
which other work may share.
"""

from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import fastavro

from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines import simulate

TARGET_SECONDS = 60.0
MODES = {
    "in_process": [],
    "two_workers": ["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
}


def emit(**fields):
    print(json.dumps(fields), flush=True)


def bare_read(paths):
    start = time.perf_counter()
    count = 0
    for path in paths:
        with open(path, "rb") as f:
            for block in fastavro.block_reader(f):
                count += sum(1 for _ in block)
    return count, time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--protocol", choices=sorted(hh.PROTOCOLS), default=hh.NAME)
    parser.add_argument("--extra", default="",
                        help="More parameter flags of the protocol, e.g. '--step_bits 8'.")
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--query_limit", type=int, default=None,
                        help="pem: Q (default: the automatic configuration of simulate).")
    parser.add_argument("--num_distinct", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    workdir = args.workdir or tempfile.mkdtemp(prefix="ldpflow-pem-bench-")
    reports = os.path.join(workdir, "reports")
    flags = ["--bits", str(args.bits), "--k", str(args.k), *args.extra.split()]
    if args.protocol == hh.NAME and args.query_limit is not None:
        flags += ["--query_limit", str(args.query_limit)]
    common = {"protocol": args.protocol, "n": args.users, "m": args.bits, "k": args.k,
              "epsilon": args.epsilon, "flags": " ".join(flags)}

    start = time.perf_counter()
    truth = simulate.run(["--oracle", args.protocol, *flags, "--epsilon", str(args.epsilon),
                          "--domain_size", str(args.num_distinct), "--users", str(args.users),
                          "--distribution", "zipf:1.1", "--seed", str(args.seed),
                          "--output", reports, "--shards", "4"])
    emit(step="simulate", **common, seconds=round(time.perf_counter() - start, 3),
         group_sizes=truth["group_sizes"])

    paths = sorted(glob.glob(f"{reports}/*.avro"))
    count, seconds = bare_read(paths)
    emit(step="bare_fastavro_decode", **common, records=count, seconds=round(seconds, 3),
         records_per_s=round(count / seconds))

    for mode in args.modes.split(","):
        output = os.path.join(workdir, f"hh-{mode}")
        command = [sys.executable, "-m", "ldpflow.pipelines.cli", "heavy-hitters",
                   f"--input={reports}/*.avro", f"--output={output}",
                   f"--protocol={args.protocol}", *MODES[mode]]  # configuration: the input's
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        with open(os.path.join(output, "heavy_hitters.json")) as f:
            doc = json.load(f)
        scores = hh.score_top_k([t["value"] for t in doc["top_k"]], truth["top"], args.k)
        emit(step="heavy_hitters", mode=mode, **common, records=doc["records"],
             seconds=round(wall, 3), elapsed_seconds=doc["elapsed_seconds"],
             records_per_s=round(doc["records"] / wall), f1=round(scores["f1"], 4),
             ncr=round(scores["ncr"], 4), target_seconds=TARGET_SECONDS,
             within_target=wall <= TARGET_SECONDS)
        for entry in doc["passes"]:
            emit(step="pass", mode=mode, **common, **{k: v for k, v in entry.items()
                                                       if k not in ("error", "sigma")})


if __name__ == "__main__":
    main()
