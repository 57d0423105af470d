"""``ldpflow heavy-hitters``: heavy-hitter report files -> the top-k values of a huge
domain, on Beam or the job plan, for every protocol of :mod:`ldpflow.core.heavy_hitters`
(``--protocol pem`` (default), ``spm``, ``mcm``, ``treehist``, ``sfp``).

Local (``--engine auto``, the default: without Beam's flags, the job plan in this process,
``--engine local``; ``--engine beam`` runs Beam's in-process FnApiRunner instead, with the
same ``heavy_hitters.json``)::

    ldpflow simulate --oracle pem --bits 64 --k 32 --epsilon 4 --domain_size 100000 \\
        --users 1000000 --distribution zipf:1.1 --seed 7 --output /tmp/pem
    ldpflow heavy-hitters --input '/tmp/pem/*.avro' --output /tmp/hh \\
        --truth /tmp/pem/truth.json

Another protocol (its reports name it; ``--protocol`` says which to accept)::

    ldpflow simulate --oracle treehist --bits 32 --k 16 --epsilon 4 --domain_size 10000 \\
        --users 1000000 --seed 7 --output /tmp/th
    ldpflow heavy-hitters --protocol treehist --input '/tmp/th/*.avro' --output /tmp/hh-th

Both cores of this machine, on Beam (its flags choose Beam)::

    ldpflow heavy-hitters ... --direct_num_workers=2 --direct_running_mode=multi_processing

Other engines (``--engine dask|spark|local``; ``docs/engines.md``) run the same job as a
Beam-free plan (:mod:`ldpflow.plan.heavy_hitters`: each pass a map over the ranges and a
merge, the candidates chosen on the driver), with the same counts, dead letters and
``heavy_hitters.json``; memory bounded by the range and candidate sizes, not by the
input::

    ldpflow heavy-hitters --input ... --output ... --engine dask --workers 2
    ldpflow heavy-hitters --input ... --output ... --engine spark --spark_master 'local[2]'

Production (any Beam runner; see ``deploy/README.md``)::

    ldpflow heavy-hitters --input 'gs://BUCKET/pem/*.avro' --output gs://BUCKET/hh \\
        --k 32 --bits 64 --expect_epsilon 4 --runner=DataflowRunner --project=PROJECT \\
        --region=REGION --temp_location=gs://BUCKET/tmp --setup_file=./setup.py

The configuration fixes the protocol's groups and passes, which the pipeline unrolls. Every
report carries its configuration, so it is the input's (its first valid report's): the
flags ``--k`` and ``--bits`` (with the protocol's own parameter flags, e.g. PEM's
``--query_limit``, ``--start_bits``, ``--step_bits``, ``--num_groups``) only check it, and
a parameter they state that the reports do not have fails the job in one line (exit 1)
before any pipeline runs; what they leave unstated (PEM's automatic groups and steps,
which the clients chose from their number) is the reports'. Only an input with no valid
report is configured by the flags alone. Pass ``s`` counts the reports of its groups for what
pass ``s - 1`` found, which reaches it as a side input. Reports of any other protocol,
configuration or codec (or epsilon, with ``--expect_epsilon``) are dead letters; without
``--expect_epsilon`` every epsilon present is identified separately. The server's options
(``--survivors``, ``--threshold_sigma``, ``--threshold``, for the protocols that have
them) and the codec's pruning of impossible strings are not part of the configuration.

Writes ``OUTPUT/heavy_hitters.json``::

    {"top_k": [{"value": V, "frequency": f, "count": c}, ...],   # best first, decoded
     "configuration": {...}, "n": N, "group_sizes": [...], "scores": {...} (--truth),
     "passes": [{"pass", "label", "reports", "candidates", "survivors", "sigma",
                 "batches", "error"}, ...],                        # one per pass
     "results": [...one per configuration...], "records": R, "reports": N,
     "dead_letters": {"total", "by_reason"}, "elapsed_seconds": S}

(with ``--poisoning detect``, each result also holds a ``poisoning`` section: PEM's
dispersion test per pass from the pass counts, ``docs/poisoning.md``; the other protocols'
says they have no defence) and the refused records with their reasons under
``OUTPUT/dead_letters/``. Timings are
Beam metrics, not document fields; :func:`run` returns the run's counts from Beam's
counters (it does not read its output back) and logs each pass once. Progress lines go to
stderr every 10 s and at the end (``--quiet``: none; ``ldpflow.plan.progress``).

On Beam, as on the other engines, deduplication shuffles the 8-byte id hashes, and the rows
of repeated ids alone (:func:`build`); each pass is counted where its reports are read (the
later passes read the input again), so no report crosses a shuffle or is held between
passes, and memory is bounded by the ranges (16 MiB) and the candidate sums, not by n
(``docs/engines.md``, "Heavy hitters, measured"). Beam is imported only on the Beam path:
``--engine local|dask|spark`` run without it.
"""

from __future__ import annotations

import functools
import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from ldpflow.core import codecs, poisoning
from ldpflow.core import heavy_hitters as hh
from ldpflow.pipelines.common import (
    acceptance_policy,
    batch_runner,
    check_engine,
    check_inputs,
    check_output,
    job_options,
    list_paths,
    open_path,
    plan_failures,
    run_pipeline,
    start_backend,
    usage_error,
)
from ldpflow.pipelines.usage import JobFailed
from ldpflow.pipelines.verdict import dead_letter_counts, input_bytes
from ldpflow.plan.heavy_hitters import ServerRule

if TYPE_CHECKING:
    import apache_beam as beam

# Beam is imported where the Beam job is built and run, not with the module:
# --engine dask|spark|local never needs it (tests/pipelines/test_heavy_hitters_cli.py).

__all__ = ["run", "build", "configure", "read_truth", "configuration_of_input"]

_LOGGER = logging.getLogger(__name__)
_PROG = "ldpflow heavy-hitters"
#: A parameter -> its flag, where they differ.
_FLAGS = {"top_k": "k", "value_bits": "bits", "epsilon": "expect_epsilon"}
#: The server-option flags (each is an option of the same name).
_SERVER_FLAGS = ("survivors", "threshold_sigma", "threshold", "refine_sigma", "significance")


def server_options(opts, prog: str = _PROG) -> dict[str, Any]:
    """The server options the flags give (``--refine_sigma off``: None, the paper's ranking).

    Raises
    ------
    SystemExit
        For a ``--refine_sigma`` that is neither a number nor ``off``.
    """
    options = {flag: getattr(opts, flag) for flag in _SERVER_FLAGS
               if getattr(opts, flag) is not None}
    for flag in ("refine_sigma", "significance"):  # a number, or off
        if flag in options:
            text = options[flag]
            try:
                options[flag] = None if text == "off" else float(text)
            except ValueError:
                raise usage_error(prog, f"--{flag} must be a number or off, got "
                                         f"{text!r}") from None
    return options


def configuration_of_input(pattern: str, fmt: str | None, protocol: str = hh.NAME,
                           beam: bool = True) -> hh.HeavyHitterProtocol | None:
    """The configuration of the first valid ``protocol`` report of the first input file
    (None when the file holds none): what the clients used, read before any pipeline
    exists. ``beam``: through Beam's file systems (the Beam job's); else through the job
    plan's (:mod:`ldpflow.plan.files`, without Beam)."""
    from ldpflow.plan.heavy_hitters import first_configuration

    return first_configuration(list_paths(pattern, beam), fmt, protocol,
                               functools.partial(open_path, beam=beam))


def _flag(name: str) -> str:
    return f"--{_FLAGS.get(name, name)}"


def check_flags(opts, prog: str = _PROG) -> None:
    """The flag checks that need no configuration (run before the input is read).

    Raises
    ------
    SystemExit
        For a parameter flag of another protocol, a server option the protocol does not
        have, ``--k`` without ``--bits`` (or the reverse), or a parameter flag without them.
    """
    name = opts.protocol
    shape = hh.shape_parameters(name)
    foreign = [flag for flag in sorted(hh.SHAPE_FLAGS)
               if getattr(opts, flag, None) is not None and flag not in shape]
    if foreign:
        takes = ", ".join(p for p in sorted(hh.PROTOCOLS)
                          if foreign[0] in hh.shape_parameters(p))
        raise usage_error(prog, f"--{foreign[0]} is not a parameter of {name} (it is of "
                                 f"{takes}); {name} takes "
                                 f"{' '.join('--' + p for p in shape) or 'no other flags'}")
    options = hh.PROTOCOLS[name].server_options
    for flag in _SERVER_FLAGS:
        if getattr(opts, flag) is not None and flag not in options:
            have = " ".join(f"--{o}" for o in options if o in _SERVER_FLAGS)
            raise usage_error(prog, f"--{flag}: {name} has no such server option (its "
                                     f"options: {have or 'none'})")
    if (opts.k is None) != (opts.bits is None):
        raise usage_error(prog, "--k and --bits go together (neither: the input's "
                                 "configuration)")
    given = [p for p in shape if getattr(opts, p) is not None]
    if opts.k is None and given:
        raise usage_error(prog, f"--{given[0]} needs --k and --bits (without them the "
                                 "configuration is the input's)")


def configure(opts, found: hh.HeavyHitterProtocol | None = None, prog: str = _PROG
              ) -> tuple[hh.HeavyHitterProtocol, dict[str, Any]]:
    """The configuration of the input (``found``, its first report's) checked against the
    flags, and the report parameters to expect.

    The reports carry their configuration, so the server takes it from them: ``--k``,
    ``--bits`` and the protocol's parameter flags only check it (a parameter they state
    that differs is :class:`~ldpflow.pipelines.usage.JobFailed`), and what they do not
    state (PEM's automatic groups and steps, chosen by the clients from their number) is
    the reports'. Only when the input holds no valid report are the flags the whole
    configuration. Without ``--expect_epsilon`` the configuration's epsilon (and hash range) is
    a placeholder: the groups and passes do not depend on it, and each epsilon present in
    the input is identified with its own; with it, reports of another epsilon are dead
    letters.

    Raises
    ------
    SystemExit
        Naming the flag, the constraint and the value, before any pipeline exists.
    JobFailed
        For a parameter the flags state that the input's configuration does not have.
    """
    name = opts.protocol
    cls = hh.PROTOCOLS[name]
    shape = hh.shape_parameters(name)
    check_flags(opts, prog)
    stated: dict[str, Any] = {}
    if opts.k is not None:
        stated = {"top_k": opts.k, "value_bits": opts.bits,
                  **{p: getattr(opts, p) for p in shape if getattr(opts, p) is not None}}
    if found is not None:
        _check_agreement(stated, found, opts, prog)
        params: dict[str, Any] = dict(found.parameters)
        if opts.expect_epsilon is not None and opts.expect_epsilon != found.epsilon:
            params["epsilon"] = opts.expect_epsilon
            params.pop("hash_range", None)  # the flags' epsilon: its own default hash range
    elif stated:
        params = {**stated, "epsilon": 1.0 if opts.expect_epsilon is None else opts.expect_epsilon}
    else:
        raise usage_error(prog, f"--input {opts.input!r} holds no valid {name} report to "
                                 "take the configuration from; pass --k and --bits")
    options = server_options(opts, prog)
    try:
        protocol = cls(**params)
        if opts.codec is not None:
            codecs.make_codec(opts.codec, bits=protocol.value_bits)
        protocol.check_options(options)
    except (TypeError, ValueError) as exc:
        flags = " ".join(f"{_flag(p)} {value}" for p, value in params.items()
                         if p != "epsilon" or opts.expect_epsilon is not None)
        raise usage_error(prog, f"{exc} (flags: {flags})") from None
    expect: dict[str, Any] = {"oracle": name, **{
        p: v for p, v in protocol.parameters.items() if p not in ("epsilon", "hash_range")}}
    if opts.codec is not None:
        expect["codec"] = opts.codec
    if opts.expect_epsilon is not None:
        expect["epsilon"] = protocol.epsilon
    return protocol, expect


def _check_agreement(stated: dict[str, Any], found: hh.HeavyHitterProtocol, opts,
                     prog: str = _PROG) -> None:
    """Each parameter the flags state equals the input configuration's (one line naming
    the first that differs, and the flags that give the reports' configuration)."""
    have = found.parameters
    for parameter, value in stated.items():
        if have.get(parameter) != value:
            theirs = " ".join(f"{_flag(p)} {v}" for p, v in have.items()
                              if p not in ("epsilon", "hash_range"))
            raise JobFailed(
                prog, f"{_flag(parameter)} {value} disagrees with the input: its {found.name} "
                       f"reports have {parameter} {have.get(parameter)} (their configuration: "
                       f"{theirs}; leave out --k and --bits to take it as it is)")


def read_truth(path: str, prog: str = _PROG, beam: bool = True) -> tuple:
    """The true values, most frequent first, of ``--truth``: ``ldpflow simulate``'s
    ``truth.json`` (its ``top`` list), a JSON list of values or of ``{"value": ...}``, or a
    text file of one value per line (integers when every line is one). ``beam``: read
    through Beam's file systems; else through the job plan's."""
    try:
        with open_path(path, beam) as f:
            text = f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise usage_error(prog, f"cannot read --truth {path!r}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if codecs.infer_codec(lines) == "int":
            return tuple(int(v) for v in lines)
        return tuple(lines)
    entries = data.get("top") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise usage_error(prog, f"--truth {path!r} must hold a non-empty list of values "
                                 "(or an object with one under 'top')")
    return tuple(e["value"] if isinstance(e, dict) else e for e in entries)


def build(pipeline: beam.Pipeline, opts, protocol: hh.HeavyHitterProtocol,
          expect: dict[str, Any], started: float | None = None,
          rule: ServerRule | None = None, progress=None, policy=None):
    """Wire read -> identify (the protocol's passes, unrolled) -> write into ``pipeline``.

    Deduplication shuffles the 8-byte id hashes only, as ``ldpflow estimate``: a first,
    light read finds the repeated ids (:class:`~ldpflow.transforms.dedup.RepeatedIds`), the
    main read splits off their rows alone, which :class:`~ldpflow.transforms.dedup.
    DeduplicateReports` resolves, and every pass is corrected exactly for them
    (:class:`~ldpflow.transforms.heavy_hitters.IdentifyHeavyHittersOfFiles`: pass 0
    counted where the reports are read, each later pass reading the ranges again).
    ``progress``: the job's progress lines (:class:`~ldpflow.plan.progress.ProgressSpec`);
    ``policy``: the acceptance policy (default: the flags' limits with ``expect``).

    Returns the commit step, which moves the staged outputs into ``--output`` once every
    writer is done (it depends on every sink).
    """
    import apache_beam as beam

    from ldpflow.plan.heavy_hitters import RANGE_BYTES
    from ldpflow.transforms.dedup import DEDUP_KEEP, DeduplicateReports, RepeatedIds, is_tally
    from ldpflow.transforms.estimate import CountDeadLettersFn, DeadLetterSummaryFn
    from ldpflow.transforms.heavy_hitters import IdentifyHeavyHittersOfFiles, WriteHeavyHitters
    from ldpflow.transforms.io import (
        CommitOutputs,
        ReadReports,
        WriteDeadLetters,
        staging_folder,
    )

    if rule is not None and rule.poisoning == "detect" and (
            protocol.name not in poisoning.HEAVY_HITTER_SUPPORTED):
        _LOGGER.warning("%s: --poisoning detect: no poisoning defence for %s (it covers %s); "
                        "each result says so", _PROG, protocol.name,
                        " ".join(poisoning.HEAVY_HITTER_SUPPORTED))
    policy = _policy(expect, opts) if policy is None else policy
    # The plan's ranges (16 MiB): a range's decode is what a task holds.
    ids = pipeline | "ReadReportIds" >> ReadReports(opts.input, opts.input_format, policy,
                                                    range_bytes=RANGE_BYTES, ids_only=True)
    repeated = ids["reports"] | "RepeatedIds" >> RepeatedIds()
    read = pipeline | "ReadReports" >> ReadReports(opts.input, opts.input_format, policy,
                                                   keep=DEDUP_KEEP, range_bytes=RANGE_BYTES,
                                                   repeated=repeated, progress=progress)
    _ = read["dead_letters"] | "CountDeadLetters" >> beam.ParDo(CountDeadLettersFn())
    # One copy of each repeated report id; the copies dropped are counted in the document.
    unique = read["repeats"] | "Deduplicate" >> DeduplicateReports()
    duplicates = (unique
                  | "Repeats" >> beam.Filter(is_tally)
                  | "RepeatCount" >> beam.Map(lambda element: element[1].duplicates)
                  | "SumRepeats" >> beam.CombineGlobally(sum))
    kept = unique | "Kept" >> beam.Filter(lambda element: not is_tally(element))
    results = ({"reports": read["reports"], "repeats": read["repeats"], "kept": kept}
               | "IdentifyHeavyHitters" >> IdentifyHeavyHittersOfFiles(
                   opts.input, opts.input_format, policy, protocol, rule,
                   dead_letters=read["dead_letters"]))
    summary = read["dead_letters"] | "SummariseDeadLetters" >> beam.CombineGlobally(
        DeadLetterSummaryFn())
    staging = staging_folder(opts.output)  # written there, then moved into place
    written = (
        results | "WriteHeavyHitters" >> WriteHeavyHitters(staging, summary, started,
                                                           duplicates),
        read["dead_letters"] | "WriteDeadLetters" >> WriteDeadLetters(staging),
    )
    return written | "CommitOutputs" >> CommitOutputs(opts.output, staging)


def _policy(expect: dict[str, Any], opts):
    """The job's acceptance policy (every engine): the configuration's reports, within the
    limits of the flags (``--max_epsilon``, ``--max_domain_size``, ``--max_keys``,
    ``--max_counters``: estimate's), the run's secret id-hash key."""
    return acceptance_policy(opts, _PROG, expect=expect)


def _run_plan(opts, protocol: hh.HeavyHitterProtocol, expect: dict[str, Any],
              rule: ServerRule, started: float, backend=None, policy=None) -> dict:
    """The job plan (:mod:`ldpflow.plan.heavy_hitters`) on ``--engine`` dask, spark or local
    (or on ``backend``, an engine already running)."""
    from ldpflow.plan.heavy_hitters import HeavyHittersJob, run_heavy_hitters
    from ldpflow.plan.progress import ProgressSpec

    check_engine(opts, _PROG)
    size = input_bytes(opts.input)
    job = HeavyHittersJob(input=opts.input, output=opts.output, protocol=protocol,
                          policy=_policy(expect, opts) if policy is None else policy,
                          pass_store=opts.pass_store or "disk",
                          progress=ProgressSpec(uuid.uuid4().hex, size),
                          rule=rule, fmt=opts.input_format,
                          started=started, input_bytes=size)
    with plan_failures(_PROG), start_backend(opts, _PROG, backend) as engine:
        summary = run_heavy_hitters(engine, job)
    for pass_index, by_key in enumerate(summary["passes"]):
        for key, figures in by_key.items():
            _LOGGER.info("%s: pass %d (%s) of %s: %d reports, %d candidates, %d kept", _PROG,
                         pass_index, protocol.pass_label(pass_index), key, figures["reports"],
                         figures["candidates"], figures["survivors"])
    _LOGGER.info("%s (%s): %d records (%d reports, %d duplicates, %d dead letters), %d "
                 "candidates estimated, in %.1fs -> %s/heavy_hitters.json", _PROG,
                 summary["engine"], summary["records"], summary["reports"],
                 summary["duplicates"], summary["dead_letters"], summary["candidates"],
                 summary["seconds"], opts.output.rstrip("/"))
    return summary


def _describe(protocol: hh.HeavyHitterProtocol, opts) -> str:
    """One line naming the configuration and its passes."""
    params = " ".join(f"{_FLAGS.get(p, p)}={v}" for p, v in protocol.parameters.items()
                      if p != "epsilon")
    passes = "; ".join(f"{s}: {protocol.pass_label(s)}" for s in range(protocol.num_passes))
    eps = "each" if opts.expect_epsilon is None else protocol.epsilon
    return (f"{protocol.name} epsilon={eps} {params}, {protocol.num_groups} groups, "
            f"{protocol.num_passes} passes ({passes})")


def run(argv: list[str] | None = None, backend=None) -> dict:
    """Run the job; returns its counts ``{"output", "state", "seconds", "records",
    "reports", "estimated" (reports less duplicates), "dead_letters", "lost_parts",
    "lost_bytes", "lost_unsized", "reasons", "input_bytes", "duplicates", "candidates",
    "survivors"}`` (from the run's
    Beam counters; only ``output``, ``state`` and ``seconds`` when the runner reports none),
    or with ``--no_wait_until_finish`` ``{"submitted": True, "output": ...}`` once submitted.
    The heavy hitters are in ``OUTPUT/heavy_hitters.json``.

    ``backend``: a job-plan engine already running (``ldpflow.plan.backend.Backend``), for
    ``--engine`` other than beam; default: the one the flags name, started and stopped here.
    The plan's run also has ``engine``, ``timings_ms`` and ``passes`` (each pass's figures
    per configuration).

    Raises
    ------
    SystemExit
        For bad flags or an input pattern that matches no file, before any pipeline exists.
    """
    options, opts = job_options("heavy-hitters", argv)
    from ldpflow.plan.progress import set_quiet

    set_quiet(opts.quiet == "true")
    fraction = opts.max_dead_letter_fraction
    if not 0 <= fraction <= 1:
        raise usage_error(_PROG, f"--max_dead_letter_fraction must be in [0, 1], got {fraction}")
    if opts.k is not None or opts.bits is not None:
        configure(opts)  # the flags' own values first: a usage error names them
    else:
        check_flags(opts)
    on_beam = opts.engine == "beam"
    check_inputs(opts.input, opts.input_format, _PROG, beam=on_beam)
    found = configuration_of_input(opts.input, opts.input_format, opts.protocol, on_beam)
    protocol, expect = configure(opts, found)
    truth = read_truth(opts.truth, beam=on_beam) if opts.truth else None
    options_given = server_options(opts)
    rule = ServerRule(options=options_given, truth=truth, poisoning=opts.poisoning)
    _LOGGER.info("%s: %s; server options %s (configuration from %s)", _PROG,
                 _describe(protocol, opts), protocol.check_options(options_given) or "none",
                 "the flags" if found is None else "the input")
    policy = _policy(expect, opts)  # the limits' usage errors before the output exists
    if opts.engine == "beam" and opts.pass_store is not None:
        raise usage_error(_PROG, "--pass_store is the job plan's (--engine dask, spark or "
                                 "local); Beam reads the input again each pass")
    if opts.engine != "beam":
        check_output(opts.output, _PROG)
        return _run_plan(opts, protocol, expect, rule, time.time(), backend, policy)
    runner = batch_runner(options, _PROG)
    check_output(opts.output, _PROG)  # the last check (it creates the folder): one line, exit 2
    import apache_beam as beam

    from ldpflow.plan.progress import ProgressSpec, finished

    started = time.time()
    pipeline = beam.Pipeline(runner=runner, options=options)
    progress = ProgressSpec(uuid.uuid4().hex, input_bytes(opts.input))
    build(pipeline, opts, protocol, expect, started, rule, progress, policy=policy)
    ran = run_pipeline(pipeline, options, _PROG)
    if ran.get("submitted"):
        return {"submitted": True, "output": opts.output}
    summary: dict[str, Any] = {"output": opts.output, "state": ran["state"],
                               "seconds": ran["seconds"]}
    counts = ran["counters"]
    finished(progress, counts.get("records"))
    if "records" in counts or "ranges" in counts:  # a range read counts, even of no record
        summary.update(records=counts.get("records", 0), reports=counts.get("reports", 0),
                       **dead_letter_counts(counts), input_bytes=input_bytes(opts.input),
                       duplicates=counts.get("duplicates", 0),
                       candidates=counts.get("heavy_hitter_candidates", 0),
                       survivors=counts.get("heavy_hitter_survivors", 0))
        summary["estimated"] = summary["reports"] - summary["duplicates"]
        for pass_index in range(protocol.num_passes):
            _LOGGER.info("%s: pass %d (%s): %d reports, %d candidates, %d kept; "
                         "aggregate %.2fs, estimate %.2fs", _PROG, pass_index,
                         protocol.pass_label(pass_index),
                         counts.get(f"pass{pass_index}_reports", 0),
                         counts.get(f"pass{pass_index}_candidates", 0),
                         counts.get(f"pass{pass_index}_survivors", 0),
                         counts.get(f"pass{pass_index}_aggregate_ms", 0) / 1000,
                         counts.get(f"pass{pass_index}_estimate_ms", 0) / 1000)
        _LOGGER.info("%s: %d records (%d reports, %d duplicates, %d dead letters), %d "
                     "candidates estimated, in %.1fs -> %s/heavy_hitters.json", _PROG,
                     summary["records"], summary["reports"], summary["duplicates"],
                     summary["dead_letters"], summary["candidates"], ran["seconds"],
                     opts.output.rstrip("/"))
        if opts.poisoning == "detect":
            summary["poisoning_alarms"] = counts.get("poisoning_alarms", 0)
            _LOGGER.info("%s: poisoning: %d of %d passes tested raised the alarm", _PROG,
                         summary["poisoning_alarms"], counts.get("poisoning_passes_tested", 0))
    else:
        _LOGGER.info("%s: done in %.1fs -> %s (the runner reported no counters)", _PROG,
                     ran["seconds"], opts.output)
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    run()
