"""Windowed heavy hitters: what one window holds, and what a pane costs, per protocol.

    python benchmarks/stream_heavy_hitters.py [--users 100000] [--k 32] [--bits 64]
        [--epsilon 4] [--protocols pem,treehist,spm,mcm,sfp] [--teststream 0] [--trace_pane]

For each protocol (its default configuration at ``--k``, ``--bits``, ``--epsilon``), the
reports of ``--users`` users (Zipf(1.1) over 10,000 random ``--bits``-bit values) are added
to one window's state (:class:`~ldpflow.transforms.windowed_heavy_hitters.WindowPasses`,
through its CombineFn, in batches of 1,000 as messages bring them); then a pane is
extracted (every pass at window close). Printed, one JSON object per protocol: the bytes
held (pass 0's sums; the report columns kept for later passes or pending for pass 0, and
per report), the share of reports kept, microseconds a report to add, the pane's seconds
(with ``--trace_pane``, its peak allocation), and the heavy hitters found against the
truth. With ``--teststream N``, also N reports through ``IdentifyHeavyHittersStream`` on a
TestStream (reports/s, one window). The machine's load is printed with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import tracemalloc

import numpy as np

from ldpflow.core import heavy_hitters as hh
from ldpflow.core.keys import ProtocolKey
from ldpflow.transforms.windowed_heavy_hitters import WindowPassesCombineFn
from ldpflow.wire.envelope import ReportBatch


def population(users, bits, seed=1):
    rng = np.random.default_rng(seed)
    domain = rng.integers(0, 2**bits, 10_000, dtype=np.uint64, endpoint=False) if bits < 64 \
        else rng.integers(0, 2**63, 10_000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    weights = 1.0 / np.arange(1, domain.size + 1) ** 1.1
    values = domain[rng.choice(domain.size, users, p=weights / weights.sum())]
    return values, domain, rng


def measure(name, users, k, bits, epsilon, trace=False):
    protocol = hh.PROTOCOLS[name](top_k=k, value_bits=bits, epsilon=epsilon)
    values, domain, rng = population(users, bits)
    ids = np.array([f"user-{i}" for i in range(users)], dtype=object)
    reports = protocol.perturb(values, ids, rng)
    key = ProtocolKey.heavy_hitters(protocol, "int")
    fn = WindowPassesCombineFn()
    fn.setup()
    acc = fn.create_accumulator()
    clock = time.perf_counter()
    for lo in range(0, users, 1000):
        acc = fn.add_input(acc, ReportBatch(key, reports[lo:lo + 1000]))
    add_seconds = time.perf_counter() - clock
    if trace:  # the pane's peak allocation (numpy reports its buffers to tracemalloc)
        tracemalloc.start()
    clock = time.perf_counter()
    result = fn.extract_output(acc)
    pane_seconds = time.perf_counter() - clock
    pane_peak = None
    if trace:
        pane_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    kept = sum(c.size for chunks in acc.kept.values() for c in chunks)
    pending = sum(c.size for c in acc.pending)
    # pass 0's sums (allocated once a run of COUNT_RUN reports, and at the pane)
    empty = protocol.create_pass_counts(0, protocol.initial_state())
    first_bytes = sum(a.nbytes for a in empty.arrays.values())
    counts = np.bincount(np.searchsorted(np.sort(domain), values), minlength=domain.size)
    truth = set(np.sort(domain)[np.argsort(-counts, kind="stable")[:k]].tolist())
    found = [t["value"] for t in result["top_k"]]
    return {
        "protocol": name, "users": users, "k": k, "bits": bits, "epsilon": epsilon,
        "groups": protocol.num_groups, "passes": protocol.num_passes,
        "pass0_sum_bytes": int(first_bytes), "kept_reports": int(kept),
        "pending_reports": int(pending), "kept_fraction": round(kept / users, 4),
        "held_bytes": int(acc.kept_bytes),
        "held_bytes_per_report": round(acc.kept_bytes / max(kept + pending, 1), 2),
        "add_us_per_report": round(add_seconds / users * 1e6, 2),
        "pane_seconds": round(pane_seconds, 3), "pane_peak_bytes": pane_peak,
        "found": len(found),
        "true_in_top_k": len(truth & set(found)), "load": os.getloadavg()[0],
        "cores": os.cpu_count(),
    }


def teststream(total, k, bits, epsilon):
    import apache_beam as beam
    from apache_beam.io.gcp.pubsub import PubsubMessage
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
    from apache_beam.testing.test_stream import TestStream
    from apache_beam.transforms.window import TimestampedValue

    from ldpflow.transforms.streaming import WindowSpec
    from ldpflow.transforms.windowed_heavy_hitters import IdentifyHeavyHittersStream
    from ldpflow.wire import formats

    pem = hh.PrefixExtendingMethod(top_k=k, value_bits=bits, epsilon=epsilon)
    values, _, rng = population(total, bits)
    ids = formats.numbered_ids("u", 0, total)
    reports = pem.perturb(values, np.array(ids, dtype=object), rng)
    table = formats.reports_table(pem, reports, formats.numbered_ids("r", 0, total), ids,
                                  rng.integers(0, 60_000, total))
    messages = [TimestampedValue(PubsubMessage(formats.encode_message(
        table.slice(lo, 1000)), {}), 1) for lo in range(0, total, 1000)]
    options = PipelineOptions([])
    options.view_as(StandardOptions).streaming = True
    began = time.perf_counter()
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        (p | TestStream().advance_watermark_to(0).add_elements(messages)
         .advance_watermark_to_infinity()
         | IdentifyHeavyHittersStream("pem", WindowSpec(60), {"oracle": "pem"}))
    seconds = time.perf_counter() - began
    return {"path": "teststream", "protocol": "pem", "reports": total,
            "seconds": round(seconds, 2), "reports_per_second": round(total / seconds),
            "load": os.getloadavg()[0], "cores": os.cpu_count()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=32)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--epsilon", type=float, default=4.0)
    parser.add_argument("--protocols", default="pem,treehist,spm,mcm,sfp")
    parser.add_argument("--teststream", type=int, default=0)
    parser.add_argument("--trace_pane", action="store_true",
                        help="Trace the pane's peak allocation (slower).")
    args = parser.parse_args()
    for name in args.protocols.split(","):
        print(json.dumps(measure(name, args.users, args.k, args.bits, args.epsilon,
                                 args.trace_pane)), flush=True)
    if args.teststream:
        print(json.dumps(teststream(args.teststream, args.k, args.bits, args.epsilon)))


if __name__ == "__main__":
    main()
