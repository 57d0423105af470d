"""Pipeline options, Beam style: one ``PipelineOptions`` subclass per group of flags.

Every flag is defined once, by one group; a job is the list of groups it reads
(:data:`JOBS`), which is also what its ``--help`` shows and the set of flags it accepts
(``ldpflow.pipelines.common.job_options``). Flags are snake_case and equal the attribute.

Required flags are not argparse-required here: Beam parses every registered options class
for every pipeline, so a required flag would break unrelated pipelines. Each job lists its
required flags in :data:`JOBS`; ``job_options`` checks them and marks them in the help.
"""

from __future__ import annotations

import dataclasses

from apache_beam.options.pipeline_options import PipelineOptions

from ldpflow.core.oracles import registry

__all__ = [
    "InputOptions",
    "OutputOptions",
    "MethodsOptions",
    "EstimateOptions",
    "PoisoningOptions",
    "VerdictOptions",
    "ContributionOptions",
    "AcceptanceOptions",
    "EngineOptions",
    "ENGINES",
    "StreamOptions",
    "HeavyHittersOptions",
    "Job",
    "JOBS",
    "DEFAULT_METHODS",
]

DEFAULT_METHODS = "base,base-pos,base-cut,norm,norm-sub,mle-apx,power-ns"


class InputOptions(PipelineOptions):
    """Where a batch job's reports come from."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--input", default=None,
                            help="Report files (a glob): .avro, .jsonl or .parquet, "
                                 "optionally .gz.")
        parser.add_argument("--input_format", choices=("avro", "json", "parquet"), default=None,
                            help="The format of every input file (default: from each file's "
                                 "name).")


class OutputOptions(PipelineOptions):
    """Where a job writes (a directory, replaced as a whole when the run ends)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--output", default=None,
                            help="Output directory: estimates.json and estimates.avro "
                                 "(heavy-hitters: heavy_hitters.json) and dead_letters/; "
                                 "stream: one JSON and one Avro file per pane.")


class MethodsOptions(PipelineOptions):
    """The post-processing methods to apply."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--methods", default=DEFAULT_METHODS,
                            help="Comma-separated post-processing methods (base: the raw "
                                 "unbiased estimate).")


class EstimateOptions(PipelineOptions):
    """What ``ldpflow estimate`` counts and when it fails."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--dedup", choices=("report_id", "none"), default="report_id",
                            help="report_id: count each report id once, the other copies as "
                                 "duplicates; none: count every copy.")


class VerdictOptions(PipelineOptions):
    """When a batch job fails (``ldpflow.pipelines.verdict``)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--max_dead_letter_fraction", type=float, default=0.1,
                            help="Exit with status 1 when more than this fraction of the "
                                 "records were refused (parts of files lost whole count by "
                                 "their bytes), or when no report was counted (the outputs "
                                 "are written either way).")


class PoisoningOptions(PipelineOptions):
    """The data-poisoning defence."""

    # One group for the jobs that have the flag: Beam gathers every option group into one
    # parser, so the flag can be defined once only.

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--poisoning", choices=("none", "detect"), default="none",
                            help="detect: test for data poisoning (fake users' crafted "
                                 "reports) and add a poisoning section to each result. "
                                 "estimate: each parameter set's reports, with recovered "
                                 "estimates; heavy-hitters: each configuration's pass counts "
                                 "(pem: a dispersion test per stage; the other protocols "
                                 "have no defence, which their results say). "
                                 "docs/poisoning.md.")


class ContributionOptions(PipelineOptions):
    """What one user may contribute."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--max_reports_per_user", type=int, default=None,
                            help="Count at most N reports per user id: in a batch run its "
                                 "earliest by event time, then report-id hash; in a stream "
                                 "per window, its first to arrive. The others are counted as "
                                 "capped, so one user's privacy loss is at most N epsilon. "
                                 "Default: no cap.")


class AcceptanceOptions(PipelineOptions):
    """What the server accepts (``ldpflow.wire.parse.AcceptancePolicy``)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        from ldpflow.wire.parse import AcceptancePolicy

        defaults = AcceptancePolicy()
        parser.add_argument("--expect_oracle", choices=sorted(registry.ORACLES), default=None,
                            help="Refuse (dead-letter) reports of any other oracle.")
        parser.add_argument("--expect_epsilon", type=float, default=None,
                            help="Refuse reports made with any other epsilon.")
        parser.add_argument("--expect_domain_size", type=int, default=None,
                            help="Refuse reports of any other domain size.")
        parser.add_argument("--max_domain_size", type=int, default=defaults.max_domain_size,
                            help="Refuse reports claiming a larger domain (pem: more groups); "
                                 "a key's counts hold about this many counters.")
        parser.add_argument("--max_hash_range", type=int, default=defaults.max_hash_range,
                            help="Refuse local-hashing reports of a larger hash range (given, "
                                 "or OLH's optimum for their epsilon).")
        parser.add_argument("--max_epsilon", type=float, default=defaults.max_epsilon,
                            help="Refuse reports of a larger epsilon.")
        parser.add_argument("--max_keys", type=int, default=defaults.max_keys,
                            help="The most parameter sets one chunk of a file may hold (the "
                                 "largest are kept).")
        parser.add_argument("--max_counters", type=int, default=defaults.max_counters,
                            help="The most counters (8 bytes each) the parameter sets of one "
                                 "chunk may need together (the largest sets first).")
        parser.add_argument("--max_key_bytes", type=int, default=defaults.max_key_bytes,
                            help="The most memory (bytes) one parameter set may need: its "
                                 "accumulator and its estimates, about 4 KiB a domain value; "
                                 "a report claiming more is refused before anything is "
                                 "allocated.")


#: The engines of ``--engine``: beam (the Beam job, any Beam runner) and the job plan's
#: (``ldpflow.plan``; ``docs/engines.md``).
ENGINES = ("beam", "dask", "spark", "local")


class EngineOptions(PipelineOptions):
    """The engine that runs the job (``docs/engines.md``)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--engine", choices=ENGINES, default="beam",
                            help="beam: Apache Beam (--runner and the Beam flags); dask: Dask "
                                 "distributed; spark: PySpark; local: the job plan in this "
                                 "process.")
        parser.add_argument("--dask_scheduler", default=None,
                            help="dask: the scheduler's address (tcp://HOST:8786); default: "
                                 "a LocalCluster of --workers worker processes.")
        parser.add_argument("--workers", type=int, default=None,
                            help="dask without --dask_scheduler: worker processes of the "
                                 "LocalCluster (default: one per core).")
        parser.add_argument("--spark_master", default=None,
                            help="spark: the master URL (local[N], local-cluster[N,C,MB], "
                                 "spark://HOST:7077, yarn, ...; default: spark-submit's "
                                 "--master, else local[*]).")


class StreamOptions(PipelineOptions):
    """Sources, sinks and windows of ``ldpflow stream``."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--subscription", default=None,
                            help="Pub/Sub subscription: projects/P/subscriptions/S.")
        parser.add_argument("--output_topic", default=None,
                            help="Pub/Sub topic for estimates (JSON, one message per window, "
                                 "key and pane).")
        parser.add_argument("--dead_letter_topic", default=None,
                            help="Pub/Sub topic for refused messages and reports, with "
                                 "reasons.")
        parser.add_argument("--dead_letter_output", default=None,
                            help="Directory for dead letters as JSON lines.")
        parser.add_argument("--window_size", type=float, default=60.0,
                            help="Window length in seconds.")
        parser.add_argument("--window_period", type=float, default=None,
                            help="Sliding windows: a new window every PERIOD seconds "
                                 "(default: fixed windows).")
        parser.add_argument("--allowed_lateness", type=float, default=0.0,
                            help="Seconds after a window's end during which late reports "
                                 "still update it (a late pane each).")
        parser.add_argument("--early_firing", type=float, default=0.0,
                            help="Emit an early pane every N seconds of processing time while "
                                 "a window is open (0: none).")
        parser.add_argument("--timestamp_attribute", default=None,
                            help="Take event time from this message attribute (milliseconds "
                                 "since the epoch or RFC 3339) instead of the reports.")
        parser.add_argument("--allow_production", nargs="?", const="true", default=None,
                            choices=("true", "false"),
                            help="Work on real Pub/Sub: needed on a remote runner (Dataflow) "
                                 "and, on a local one, without PUBSUB_EMULATOR_HOST; refused "
                                 "without it (true or no value: allowed).")


class HeavyHittersOptions(PipelineOptions):
    """The protocol, its configuration and the server options of ``ldpflow heavy-hitters``.

    The configuration (``--k``, ``--bits`` and the protocol's own parameter flags) fixes the
    groups and passes when the pipeline is built; without ``--k`` and ``--bits`` it is read
    from the first report of the input. Reports of any other protocol or configuration are
    dead letters. ``--survivors``, ``--threshold_sigma`` and ``--threshold`` are server
    options (of pem, treehist and sfp): clients do not depend on them.
    """

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--protocol", choices=("mcm", "pem", "sfp", "spm", "treehist"),
                            default="pem",
                            help="The heavy-hitter protocol of the reports.")
        parser.add_argument("--k", type=int, default=None,
                            help="Top-k size of the configuration (default: from the input).")
        parser.add_argument("--bits", type=int, default=None,
                            help="m: the width of the values, in [1, 64] (default: from the "
                                 "input).")
        for flag, protocols, text in _SHAPE_HELP:
            parser.add_argument(f"--{flag}", type=int, default=None,
                                help=f"{protocols}: {text}")
        parser.add_argument("--survivors", type=int, default=None,
                            help="pem, treehist, sfp: candidates each pass keeps (pem: "
                                 "default 2k, or as many as Q allows; treehist, sfp: 4k).")
        parser.add_argument("--threshold_sigma", type=float, default=None,
                            help="pem, treehist, sfp: keep only candidates estimated at "
                                 "THRESHOLD_SIGMA standard deviations or more (treehist, sfp: "
                                 "default 3).")
        parser.add_argument("--threshold", type=float, default=None,
                            help="pem, treehist, sfp: keep only candidates of estimated "
                                 "frequency >= THRESHOLD.")
        parser.add_argument("--significance", default=None,
                            help="pem: return only values significantly above zero among "
                                 "the last stage's candidates, family-wise at this level "
                                 "(weighted Bonferroni; default 0.05); off: no such test "
                                 "(the paper).")
        parser.add_argument("--refine_sigma", default=None,
                            help="pem: z of the combined ranking of a stage's candidates with "
                                 "the earlier stages' estimates (default 3); off: each "
                                 "stage's own estimates (the paper's ranking).")
        parser.add_argument("--codec", choices=("int", "string"), default=None,
                            help="Refuse reports of the other codec (default: each report's "
                                 "own); the output decodes the values.")
        parser.add_argument("--epsilon", type=float, default=None,
                            help="Refuse (dead-letter) reports made with any other epsilon "
                                 "(default: each epsilon in the input is its own result).")
        parser.add_argument("--truth", default=None,
                            help="A truth file (ldpflow simulate's truth.json, or one value "
                                 "per line, most frequent first): the output adds precision, "
                                 "recall, F1 and NCR of every result.")


#: The protocols' parameter flags: (flag, protocols, help), the protocols' own parameters
#: (``ldpflow.core.heavy_hitters.shape_parameters``; a test keeps the two in step).
_SHAPE_HELP = (
    ("query_limit", "pem, spm, mcm, sfp",
     "Q, the most candidates one pass may estimate (default 2**20, or the input's)."),
    ("start_bits", "pem", "gamma (default ceil(log2 k), or the input's)."),
    ("step_bits", "pem, treehist",
     "pem: eta (default the largest with k * 2**eta <= Q); treehist: bits per level "
     "(default 8)."),
    ("num_groups", "pem", "g (default ceil((bits - start_bits) / step_bits); must agree)."),
    ("hash_range", "pem, treehist",
     "OLH's number of buckets, a power of two (default from epsilon)."),
    ("num_segments", "spm", "t, the segments of a value (default from Q)."),
    ("segment_top", "spm", "values kept per segment and pairs per segment pair (default k)."),
    ("num_channels", "mcm", "T, the channels (default 4k)."),
    ("channel_seed", "mcm", "the key of the public value-to-channel hash (default 0)."),
    ("fragment_bits", "sfp", "the width of a fragment (default 16)."),
    ("hash_bits", "sfp", "the width of the hash that glues fragments (default 6)."),
    ("hash_seed", "sfp", "the key of that hash (default 0)."),
)


@dataclasses.dataclass(frozen=True)
class Job:
    """A Beam job of the CLI: its option groups (in help order) and required flags."""

    name: str
    summary: str
    groups: tuple[type[PipelineOptions], ...]
    required: tuple[str, ...] = ()


JOBS = {
    "estimate": Job("estimate", "Report files -> consistent frequency estimates.",
                    (InputOptions, OutputOptions, MethodsOptions, EstimateOptions,
                     PoisoningOptions, VerdictOptions, ContributionOptions,
                     AcceptanceOptions, EngineOptions),
                    ("input", "output")),
    "stream": Job("stream", "Reports from Pub/Sub -> windowed consistent estimates.",
                  (StreamOptions, OutputOptions, MethodsOptions, ContributionOptions,
                   AcceptanceOptions),
                  ("subscription",)),
    "heavy-hitters": Job("heavy-hitters",
                         "Heavy-hitter reports (pem, spm, mcm, treehist, sfp) -> the most "
                         "frequent values of a huge domain.",
                         (InputOptions, OutputOptions, HeavyHittersOptions,
                          PoisoningOptions, VerdictOptions),
                         ("input", "output")),
}
