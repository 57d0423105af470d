"""``ldpflow heavy-hitters``: PEM report files -> the top-k values of a huge domain, on Beam.

Local (the default runner is Beam's Python FnApiRunner: in-process, offline)::

    ldpflow simulate --oracle pem --bits 64 --k 32 --epsilon 4 --domain_size 100000 \\
        --users 1000000 --distribution zipf:1.1 --seed 7 --output /tmp/pem
    ldpflow heavy-hitters --input '/tmp/pem/*.avro' --output /tmp/hh --k 32 --bits 64

Both cores of this machine::

    ldpflow heavy-hitters ... --direct_num_workers=2 --direct_running_mode=multi_processing

Production (any Beam runner; see ``deploy/README.md``)::

    ldpflow heavy-hitters --input 'gs://BUCKET/pem/*.avro' --output gs://BUCKET/hh \\
        --k 32 --bits 64 --epsilon 4 --runner=DataflowRunner --project=PROJECT \\
        --region=REGION --temp_location=gs://BUCKET/tmp --setup_file=./setup.py

The flags ``--k``, ``--bits`` and ``--query_limit`` (and ``--start_bits``, ``--step_bits``,
``--num_groups`` when not seed 002's defaults) fix the configuration and so the number of
stages ``g``, which the pipeline unrolls: stage ``i`` counts group ``i``'s reports for the
extensions of stage ``i - 1``'s top ``k``, which reach it as a side input. Reports of any
other configuration or codec (or epsilon, with ``--epsilon``) are dead letters; without
``--epsilon`` every epsilon (and hash range) present is identified separately.

Writes ``OUTPUT/heavy_hitters.json``::

    {"top_k": [{"value": V, "frequency": f, "count": c}, ...],   # best first, decoded
     "configuration": {...}, "n": N, "group_sizes": [...],
     "stages": [{"stage", "prefix_bits", "reports", "candidates", "survivors", "sigma",
                 "aggregate_seconds", "estimate_seconds", "span_seconds", ...}, ...],
     "results": [...one per configuration...], "records": R, "reports": N,
     "dead_letters": {"total", "by_reason"}, "elapsed_seconds": S}

and the refused records with their reasons under ``OUTPUT/dead_letters/``.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from ldpflow.core import codecs
from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines.estimate import batch_runner, check_inputs, detached
from ldpflow.pipelines.options import HeavyHittersOptions, require
from ldpflow.transforms.dedup import DeduplicateReports, is_tally
from ldpflow.transforms.estimate import DeadLetterSummaryFn
from ldpflow.transforms.heavy_hitters import IdentifyHeavyHitters, WriteHeavyHitters
from ldpflow.transforms.io import (
    CommitOutputs,
    ReadReports,
    SplitDeadLetters,
    WriteDeadLetters,
    staging_folder,
)

__all__ = ["run", "build", "configure"]

_LOGGER = logging.getLogger(__name__)
_PROG = "ldpflow heavy-hitters"
_FLAGS = {"top_k": "k", "value_bits": "bits"}  # PEM parameter -> its flag


def configure(opts: HeavyHittersOptions) -> tuple[hh.PrefixExtendingMethod, dict[str, Any]]:
    """The PEM configuration of the flags and the report parameters to expect.

    Without ``--epsilon`` the configuration's epsilon (and hash range) is a placeholder:
    the stages (``gamma``, ``eta``, ``g``) do not depend on it, and each epsilon present in
    the input is identified with its own.

    Raises
    ------
    SystemExit
        Naming the flag, the constraint and the value, before any pipeline exists.
    """
    require(opts, "input", "output", "k", "bits", prog=_PROG)
    params: dict[str, Any] = {"top_k": opts.k, "value_bits": opts.bits,
                              "epsilon": 1.0 if opts.epsilon is None else opts.epsilon}
    for name in ("query_limit", "start_bits", "step_bits", "num_groups", "threshold"):
        if getattr(opts, name) is not None:
            params[name] = getattr(opts, name)
    try:
        pem = hh.PrefixExtendingMethod(**params)
        codec = codecs.make_codec(opts.codec, bits=pem.value_bits)
    except (TypeError, ValueError) as exc:
        flags = " ".join(f"--{_FLAGS.get(name, name)} {value}" for name, value in params.items()
                         if name != "epsilon" or opts.epsilon is not None)
        raise SystemExit(f"{_PROG}: error: {exc} (flags: {flags} --codec {opts.codec})") from None
    expect: dict[str, Any] = {
        "oracle": hh.NAME, "top_k": pem.top_k, "value_bits": pem.value_bits,
        "query_limit": pem.query_limit, "start_bits": pem.start_bits,
        "step_bits": pem.step_bits, "num_groups": pem.num_groups, "codec": codec.name,
    }
    if opts.epsilon is not None:
        expect["epsilon"] = pem.epsilon
    return pem, expect


def build(pipeline: beam.Pipeline, opts: HeavyHittersOptions, pem: hh.PrefixExtendingMethod,
          expect: dict[str, Any], started: float | None = None):
    """Wire read -> identify (``g`` unrolled stages) -> write into ``pipeline``.

    Returns the commit step, which moves the staged outputs into ``--output`` once every
    writer is done (it depends on every sink).
    """
    read = (pipeline
            | "ReadReports" >> ReadReports(opts.input, opts.input_format, expect,
                                           keep=("id_hashes",))
            | "Split" >> SplitDeadLetters())
    # One copy of each report id; the copies dropped are counted in the document.
    unique = read["reports"] | "Deduplicate" >> DeduplicateReports()
    duplicates = (unique
                  | "Repeats" >> beam.Filter(is_tally)
                  | "RepeatCount" >> beam.Map(lambda element: element[1].duplicates)
                  | "SumRepeats" >> beam.CombineGlobally(sum))
    batches = unique | "Batches" >> beam.Filter(lambda element: not is_tally(element))
    results = batches | "IdentifyHeavyHitters" >> IdentifyHeavyHitters(
        pem.num_groups, pem.threshold, dead_letters=read["dead_letters"])
    summary = read["dead_letters"] | "SummariseDeadLetters" >> beam.CombineGlobally(
        DeadLetterSummaryFn())
    staging = staging_folder(opts.output)  # written there, then moved into place
    written = (
        results | "WriteHeavyHitters" >> WriteHeavyHitters(staging, summary, started,
                                                           duplicates),
        read["dead_letters"] | "WriteDeadLetters" >> WriteDeadLetters(staging),
    )
    return written | "CommitOutputs" >> CommitOutputs(opts.output, staging)


def run(argv: list[str] | None = None) -> dict:
    """Run the job; returns the ``heavy_hitters.json`` document (plus ``wall_seconds``), or
    with ``--no_wait_until_finish`` ``{"submitted": True, "output": ...}`` once submitted.

    Raises
    ------
    SystemExit
        For bad flags or an input pattern that matches no file, before any pipeline exists.
    """
    options = PipelineOptions(argv)
    opts = options.view_as(HeavyHittersOptions)
    pem, expect = configure(opts)
    check_inputs(opts.input, opts.input_format, _PROG)
    _LOGGER.info("PEM: k=%d m=%d Q=%d gamma=%d eta=%d g=%d prefix bits %s", pem.top_k,
                 pem.value_bits, pem.query_limit, pem.start_bits, pem.step_bits, pem.num_groups,
                 list(pem.prefix_bits))
    started, clock = time.time(), time.perf_counter()
    pipeline = beam.Pipeline(runner=batch_runner(options), options=options)
    build(pipeline, opts, pem, expect, started)
    result = pipeline.run()
    if detached(options):
        _LOGGER.info("submitted; not waiting for the job (--no_wait_until_finish): %s", result)
        return {"submitted": True, "output": opts.output}
    result.wait_until_finish()
    path = opts.output.rstrip("/") + "/heavy_hitters.json"
    with FileSystems.open(path) as f:
        document = json.loads(f.read().decode("utf-8"))
    document["wall_seconds"] = round(time.perf_counter() - clock, 3)
    for stage in document["stages"]:
        _LOGGER.info("stage %d (%d bits): %d reports, %d candidates, %d kept; aggregate %.2fs, "
                     "estimate %.2fs", stage["stage"], stage["prefix_bits"], stage["reports"],
                     stage["candidates"], stage["survivors"], stage["aggregate_seconds"],
                     stage["estimate_seconds"])
    _LOGGER.info("identified %d heavy hitters from %d records (%d dead letters) in %.1fs -> %s",
                 len(document["top_k"]), document["records"], document["dead_letters"]["total"],
                 document["wall_seconds"], path)
    return document


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run()
