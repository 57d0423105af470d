"""``ldpflow heavy-hitters``: PEM report files -> the top-k values of a huge domain, on Beam.

Local (the default runner is Beam's Python FnApiRunner: in-process, offline)::

    ldpflow simulate --oracle pem --bits 64 --k 32 --epsilon 4 --domain_size 100000 \\
        --users 1000000 --distribution zipf:1.1 --seed 7 --output /tmp/pem
    ldpflow heavy-hitters --input '/tmp/pem/*.avro' --output /tmp/hh \\
        --truth /tmp/pem/truth.json

Both cores of this machine::

    ldpflow heavy-hitters ... --direct_num_workers=2 --direct_running_mode=multi_processing

Production (any Beam runner; see ``deploy/README.md``)::

    ldpflow heavy-hitters --input 'gs://BUCKET/pem/*.avro' --output gs://BUCKET/hh \\
        --k 32 --bits 64 --epsilon 4 --runner=DataflowRunner --project=PROJECT \\
        --region=REGION --temp_location=gs://BUCKET/tmp --setup_file=./setup.py

The configuration fixes the number of stages ``g``, which the pipeline unrolls: from the
flags ``--k`` and ``--bits`` (with ``--query_limit``, ``--start_bits``, ``--step_bits``,
``--num_groups`` when not the PEM paper's defaults), or, without ``--k`` and ``--bits``,
from the first report of the input (every report carries its configuration). Stage ``i``
counts group ``i``'s reports for the extensions of stage ``i - 1``'s survivors, which reach
it as a side input. Reports of any other configuration or codec (or epsilon, with
``--epsilon``) are dead letters; without ``--epsilon`` every epsilon present is identified
separately. The server's survivor rule (``--survivors``, default ``2 k``;
``--threshold_sigma``; ``--threshold``) and the codec's pruning of impossible strings are
not part of the configuration.

Writes ``OUTPUT/heavy_hitters.json``::

    {"top_k": [{"value": V, "frequency": f, "count": c}, ...],   # best first, decoded
     "configuration": {...}, "n": N, "group_sizes": [...], "scores": {...} (--truth),
     "stages": [{"stage", "prefix_bits", "reports", "candidates", "survivors", "sigma",
                 "batches", "error"}, ...],
     "results": [...one per configuration...], "records": R, "reports": N,
     "dead_letters": {"total", "by_reason"}, "elapsed_seconds": S}

and the refused records with their reasons under ``OUTPUT/dead_letters/``. Timings are
Beam metrics, not document fields; :func:`run` returns the run's counts from Beam's
counters (it does not read its output back) and logs each stage once.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from ldpflow.core import codecs
from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines.common import (
    batch_runner,
    check_inputs,
    job_options,
    run_pipeline,
    usage_error,
)
from ldpflow.transforms.dedup import DeduplicateReports, is_tally
from ldpflow.transforms.estimate import DeadLetterSummaryFn
from ldpflow.transforms.heavy_hitters import (
    IdentifyHeavyHitters,
    SurvivorRule,
    WriteHeavyHitters,
)
from ldpflow.transforms.io import (
    CommitOutputs,
    ReadReports,
    WriteDeadLetters,
    staging_folder,
)

__all__ = ["run", "build", "configure", "read_truth", "configuration_of_input"]

_LOGGER = logging.getLogger(__name__)
_PROG = "ldpflow heavy-hitters"
_FLAGS = {"top_k": "k", "value_bits": "bits"}  # PEM parameter -> its flag
_SHAPE = ("query_limit", "start_bits", "step_bits", "num_groups")


def configuration_of_input(pattern: str, fmt: str | None) -> hh.PrefixExtendingMethod | None:
    """The PEM configuration of the first valid report of the first input file (None when
    the file holds none): what the clients used, read before any pipeline exists."""
    from ldpflow.wire import formats
    from ldpflow.wire.parse import AcceptancePolicy

    policy = AcceptancePolicy(expect={"oracle": hh.NAME})
    for metadata in sorted(FileSystems.match([pattern])[0].metadata_list, key=lambda m: m.path):
        kind = fmt or formats.detect_format(metadata.path)
        with FileSystems.open(metadata.path) as stream:
            for parsed in formats.read_reports(stream, kind, source=metadata.path,
                                               policy=policy):
                for key in parsed.batches:
                    return key.build()
    return None


def configure(opts, found: hh.PrefixExtendingMethod | None = None
              ) -> tuple[hh.PrefixExtendingMethod, dict[str, Any]]:
    """The PEM configuration of the flags (or of the input, ``found``) and the report
    parameters to expect.

    Without ``--epsilon`` the configuration's epsilon (and hash range) is a placeholder:
    the stages (``gamma``, ``eta``, ``g``) do not depend on it, and each epsilon present in
    the input is identified with its own.

    Raises
    ------
    SystemExit
        Naming the flag, the constraint and the value, before any pipeline exists.
    """
    if opts.protocol != hh.NAME:
        raise usage_error(_PROG, f"--protocol {opts.protocol}: only pem reports have a wire "
                                 "form so far (the report schema carries PEM's group and "
                                 "configuration only); identify other protocols in core")
    if (opts.k is None) != (opts.bits is None):
        raise usage_error(_PROG, "--k and --bits go together (neither: the input's "
                                 "configuration)")
    if opts.k is None:
        if found is None:
            raise usage_error(_PROG, f"--input {opts.input!r} holds no valid pem report to "
                                     "take the configuration from; pass --k and --bits")
        params: dict[str, Any] = {name: getattr(found, name) for name in
                                  ("top_k", "value_bits", *_SHAPE, "hash_range")}
        params["epsilon"] = found.epsilon if opts.epsilon is None else opts.epsilon
        if opts.epsilon is not None and opts.epsilon != found.epsilon:
            params.pop("hash_range")  # the flags' epsilon: its own default hash range
    else:
        params = {"top_k": opts.k, "value_bits": opts.bits,
                  "epsilon": 1.0 if opts.epsilon is None else opts.epsilon}
        for name in _SHAPE:
            if getattr(opts, name) is not None:
                params[name] = getattr(opts, name)
    try:
        pem = hh.PrefixExtendingMethod(**params)
        if opts.codec is not None:
            codecs.make_codec(opts.codec, bits=pem.value_bits)
        if opts.survivors is not None:
            pem._check_survivors(opts.survivors)
        for name in ("threshold", "threshold_sigma"):
            value = getattr(opts, name)
            if value is not None and not float("-inf") < value < float("inf"):
                raise ValueError(f"{name} must be finite, got {value!r}")
    except (TypeError, ValueError) as exc:
        flags = " ".join(f"--{_FLAGS.get(name, name)} {value}" for name, value in params.items()
                         if name != "epsilon" or opts.epsilon is not None)
        raise usage_error(_PROG, f"{exc} (flags: {flags})") from None
    expect: dict[str, Any] = {
        "oracle": hh.NAME, "top_k": pem.top_k, "value_bits": pem.value_bits,
        "query_limit": pem.query_limit, "start_bits": pem.start_bits,
        "step_bits": pem.step_bits, "num_groups": pem.num_groups,
    }
    if opts.codec is not None:
        expect["codec"] = opts.codec
    if opts.epsilon is not None:
        expect["epsilon"] = pem.epsilon
    return pem, expect


def read_truth(path: str) -> tuple:
    """The true values, most frequent first, of ``--truth``: ``ldpflow simulate``'s
    ``truth.json`` (its ``top`` list), a JSON list of values or of ``{"value": ...}``, or a
    text file of one value per line (integers when every line is one)."""
    try:
        with FileSystems.open(path) as f:
            text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise usage_error(_PROG, f"cannot read --truth {path!r}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if codecs.infer_codec(lines) == "int":
            return tuple(int(v) for v in lines)
        return tuple(lines)
    entries = data.get("top") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise usage_error(_PROG, f"--truth {path!r} must hold a non-empty list of values "
                                 "(or an object with one under 'top')")
    return tuple(e["value"] if isinstance(e, dict) else e for e in entries)


def build(pipeline: beam.Pipeline, opts, pem: hh.PrefixExtendingMethod,
          expect: dict[str, Any], started: float | None = None,
          rule: SurvivorRule | None = None):
    """Wire read -> identify (``g`` unrolled stages) -> write into ``pipeline``.

    Returns the commit step, which moves the staged outputs into ``--output`` once every
    writer is done (it depends on every sink).
    """
    read = pipeline | "ReadReports" >> ReadReports(opts.input, opts.input_format, expect,
                                                   keep=("id_hashes",))
    # One copy of each report id; the copies dropped are counted in the document.
    unique = read["reports"] | "Deduplicate" >> DeduplicateReports()
    duplicates = (unique
                  | "Repeats" >> beam.Filter(is_tally)
                  | "RepeatCount" >> beam.Map(lambda element: element[1].duplicates)
                  | "SumRepeats" >> beam.CombineGlobally(sum))
    batches = unique | "Batches" >> beam.Filter(lambda element: not is_tally(element))
    results = batches | "IdentifyHeavyHitters" >> IdentifyHeavyHitters(
        pem.num_groups, rule, dead_letters=read["dead_letters"])
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
    """Run the job; returns its counts ``{"output", "state", "seconds", "records",
    "reports", "dead_letters", "duplicates", "candidates", "survivors"}`` (from the run's
    Beam counters; only ``output``, ``state`` and ``seconds`` when the runner reports none),
    or with ``--no_wait_until_finish`` ``{"submitted": True, "output": ...}`` once submitted.
    The heavy hitters are in ``OUTPUT/heavy_hitters.json``.

    Raises
    ------
    SystemExit
        For bad flags or an input pattern that matches no file, before any pipeline exists.
    """
    options, opts = job_options("heavy-hitters", argv)
    if opts.k is not None or opts.bits is not None or opts.protocol != hh.NAME:
        pem, expect = configure(opts)  # the flags first: a usage error names them
        check_inputs(opts.input, opts.input_format, _PROG)
    else:
        check_inputs(opts.input, opts.input_format, _PROG)
        pem, expect = configure(opts, configuration_of_input(opts.input, opts.input_format))
    truth = read_truth(opts.truth) if opts.truth else None
    rule = SurvivorRule(survivors=opts.survivors, threshold_sigma=opts.threshold_sigma,
                        threshold=opts.threshold, truth=truth)
    _LOGGER.info("%s: pem k=%d m=%d epsilon=%s Q=%d gamma=%d eta=%d g=%d, prefix bits %s, "
                 "%d survivors per stage%s (configuration from %s)", _PROG, pem.top_k,
                 pem.value_bits, "each" if opts.epsilon is None else pem.epsilon,
                 pem.query_limit, pem.start_bits, pem.step_bits, pem.num_groups,
                 list(pem.prefix_bits), opts.survivors or pem.default_survivors,
                 "" if opts.threshold_sigma is None else f" above {opts.threshold_sigma} sigma",
                 "the flags" if opts.k is not None else "the input")
    started = time.time()
    pipeline = beam.Pipeline(runner=batch_runner(options, _PROG), options=options)
    build(pipeline, opts, pem, expect, started, rule)
    ran = run_pipeline(pipeline, options, _PROG)
    if ran.get("submitted"):
        return {"submitted": True, "output": opts.output}
    summary: dict[str, Any] = {"output": opts.output, "state": ran["state"],
                               "seconds": ran["seconds"]}
    counts = ran["counters"]
    if "records" in counts:
        summary.update(records=counts["records"], reports=counts.get("reports", 0),
                       dead_letters=counts.get("dead_letters", 0),
                       duplicates=counts.get("duplicates", 0),
                       candidates=counts.get("heavy_hitter_candidates", 0),
                       survivors=counts.get("heavy_hitter_survivors", 0))
        for stage, bits in enumerate(pem.prefix_bits):
            _LOGGER.info("%s: stage %d (%d-bit prefixes): %d reports, %d candidates, %d kept; "
                         "aggregate %.2fs, estimate %.2fs", _PROG, stage, bits,
                         counts.get(f"stage{stage}_reports", 0),
                         counts.get(f"stage{stage}_candidates", 0),
                         counts.get(f"stage{stage}_survivors", 0),
                         counts.get(f"stage{stage}_aggregate_ms", 0) / 1000,
                         counts.get(f"stage{stage}_estimate_ms", 0) / 1000)
        _LOGGER.info("%s: %d records (%d reports, %d duplicates, %d dead letters), %d "
                     "candidates estimated, in %.1fs -> %s/heavy_hitters.json", _PROG,
                     summary["records"], summary["reports"], summary["duplicates"],
                     summary["dead_letters"], summary["candidates"], ran["seconds"],
                     opts.output.rstrip("/"))
    else:
        _LOGGER.info("%s: done in %.1fs -> %s (the runner reported no counters)", _PROG,
                     ran["seconds"], opts.output)
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run()
