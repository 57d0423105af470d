"""Pipeline options: one ``PipelineOptions`` subclass per job family; flags are snake_case."""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from ldpflow.core.oracles import registry

__all__ = [
    "acceptance_policy",
    "expected_oracle",
    "EstimateOptions",
    "StreamOptions",
    "HeavyHittersOptions",
    "DEFAULT_METHODS",
    "require",
]

DEFAULT_METHODS = "base,base-pos,base-cut,norm,norm-sub,mle-apx,power-ns"


class _OnceParser:
    """A parser view that adds each flag once.

    Beam builds one argparse parser from every ``PipelineOptions`` subclass
    (``get_all_options``, called by ``Pipeline.run``), and argparse refuses a flag defined
    twice; the job classes here share flags (``--input``, ``--output``, ...). The first
    definition serves that combined parser; each job's own view (``view_as``) still parses
    with its own class's definitions.
    """

    def __init__(self, parser):
        self._parser = parser

    def add_argument(self, *names, **kwargs):
        if any(name in self._parser._option_string_actions for name in names):
            return None
        return self._parser.add_argument(*names, **kwargs)

    def __getattr__(self, name):
        return getattr(self._parser, name)


def _add_policy_args(parser) -> None:
    """The server's acceptance limits (``ldpflow.wire.parse.AcceptancePolicy``)."""
    from ldpflow.wire.parse import AcceptancePolicy

    defaults = AcceptancePolicy()
    parser.add_argument("--max_domain_size", type=int, default=defaults.max_domain_size,
                        help="Refuse reports claiming a larger domain (pem: more groups); a "
                             "key's counts hold about this many counters. "
                             f"Default {defaults.max_domain_size}.")
    parser.add_argument("--max_hash_range", type=int, default=defaults.max_hash_range,
                        help="Refuse local-hashing reports of a larger hash range (given, or "
                             "OLH's optimum for their epsilon). "
                             f"Default {defaults.max_hash_range}.")
    parser.add_argument("--max_epsilon", type=float, default=defaults.max_epsilon,
                        help=f"Refuse reports of a larger epsilon. Default {defaults.max_epsilon}.")
    parser.add_argument("--max_keys", type=int, default=defaults.max_keys,
                        help="The most parameter sets one chunk of a file may hold (the "
                             f"largest are kept). Default {defaults.max_keys}.")


def acceptance_policy(opts: PipelineOptions, expect: dict, prog: str):
    """The :class:`~ldpflow.wire.parse.AcceptancePolicy` of a job's flags, checked before
    any pipeline exists (a usage error names the flag)."""
    from ldpflow.wire.parse import AcceptancePolicy

    for name in ("max_domain_size", "max_hash_range", "max_keys"):
        value = getattr(opts, name)
        if value is None or value < 1:
            raise SystemExit(f"{prog}: error: --{name} must be a positive integer, got {value}")
    if not opts.max_epsilon > 0:
        raise SystemExit(f"{prog}: error: --max_epsilon must be > 0, got {opts.max_epsilon}")
    return AcceptancePolicy(expect=dict(expect), max_domain_size=opts.max_domain_size,
                            max_hash_range=opts.max_hash_range, max_epsilon=opts.max_epsilon,
                            max_keys=opts.max_keys)


def expected_oracle(opts: PipelineOptions, prog: str) -> dict:
    """The ``--expect_*`` parameters, checked by the oracle's own checks when all three
    name one (so ``--expect_epsilon -1`` is a usage error, not a filter that refuses all)."""
    from ldpflow.core import validation

    expect = {k: v for k, v in {"oracle": opts.expect_oracle, "epsilon": opts.expect_epsilon,
                                "domain_size": opts.expect_domain_size}.items() if v is not None}
    try:
        if "epsilon" in expect:
            expect["epsilon"] = validation.check_epsilon(expect["epsilon"],
                                                         name="--expect_epsilon")
        if "domain_size" in expect:
            validation.check_domain_size(expect["domain_size"], name="--expect_domain_size")
        if len(expect) == 3:
            registry.make(expect["oracle"], epsilon=expect["epsilon"],
                          domain_size=expect["domain_size"])
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"{prog}: error: {exc}") from None
    return expect


class EstimateOptions(PipelineOptions):
    """Flags of ``ldpflow estimate``."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser = _OnceParser(parser)
        # Not argparse-required: Beam parses every options class for every pipeline, so a
        # required flag here would break unrelated pipelines; run() checks them instead.
        parser.add_argument("--input", default=None,
                            help="(required) Report files (glob): .avro, .jsonl or .parquet, "
                                 "optionally .gz.")
        parser.add_argument("--output", default=None,
                            help="(required) Output directory: estimates.json, estimates.avro, "
                                 "dead_letters/.")
        parser.add_argument("--methods", default=DEFAULT_METHODS,
                            help="Comma-separated post-processing methods (base = raw unbiased).")
        parser.add_argument("--input_format", choices=("avro", "json", "parquet"), default=None,
                            help="Format of every input file (default: from each file's name).")
        parser.add_argument("--max_dead_letter_fraction", type=float, default=0.1,
                            help="Exit with status 1 when more than this fraction of the "
                                 "records were refused, or when no report was estimated "
                                 "(the outputs are written either way). Default 0.1.")
        parser.add_argument("--dedup", choices=("report_id", "none"), default="report_id",
                            help="report_id: count each report id once, the other copies as "
                                 "duplicates in the output; none: count every copy.")
        parser.add_argument("--expect_oracle", choices=sorted(registry.ORACLES), default=None,
                            help="Refuse (dead-letter) reports of any other oracle.")
        parser.add_argument("--expect_epsilon", type=float, default=None,
                            help="Refuse reports made with any other epsilon.")
        parser.add_argument("--expect_domain_size", type=int, default=None,
                            help="Refuse reports of any other domain size.")
        _add_policy_args(parser)


class StreamOptions(PipelineOptions):
    """Flags of ``ldpflow stream`` (windowed estimates from Pub/Sub)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser = _OnceParser(parser)
        parser.add_argument("--subscription", default=None,
                            help="(required) Pub/Sub subscription: projects/P/subscriptions/S.")
        parser.add_argument("--output_topic", default=None,
                            help="Pub/Sub topic for estimates (JSON, one message per window, "
                                 "key and pane).")
        parser.add_argument("--output", default=None,
                            help="Directory for estimates as JSON lines (one file per pane).")
        parser.add_argument("--dead_letter_topic", default=None,
                            help="Pub/Sub topic for refused messages and reports, with reasons.")
        parser.add_argument("--dead_letter_output", default=None,
                            help="Directory for dead letters as JSON lines.")
        parser.add_argument("--methods", default=DEFAULT_METHODS,
                            help="Comma-separated post-processing methods.")
        parser.add_argument("--window_size", type=float, default=60.0,
                            help="Window length in seconds.")
        parser.add_argument("--window_period", type=float, default=None,
                            help="Sliding windows: a new window every PERIOD seconds "
                                 "(default: fixed windows).")
        parser.add_argument("--allowed_lateness", type=float, default=0.0,
                            help="Seconds after a window's end during which late reports still "
                                 "update it (a late pane each).")
        parser.add_argument("--early_firing", type=float, default=0.0,
                            help="Emit an early pane every N seconds of processing time while a "
                                 "window is open (0: none).")
        parser.add_argument("--timestamp_attribute", default=None,
                            help="Take event time from this message attribute (milliseconds "
                                 "since the epoch or RFC 3339) instead of the reports.")
        parser.add_argument("--expect_oracle", choices=sorted(registry.ORACLES), default=None)
        parser.add_argument("--expect_epsilon", type=float, default=None)
        parser.add_argument("--expect_domain_size", type=int, default=None)
        _add_policy_args(parser)


class HeavyHittersOptions(PipelineOptions):
    """Flags of ``ldpflow heavy-hitters`` (PEM: the prefix extending method).

    ``--k``, ``--bits`` and ``--query_limit`` (with ``--start_bits``, ``--step_bits`` or
    ``--num_groups`` when not the defaults of seed 002) fix the number of stages when the
    pipeline is built; reports of any other configuration are dead letters.
    """

    @classmethod
    def _add_argparse_args(cls, parser):
        parser = _OnceParser(parser)
        parser.add_argument("--input", default=None,
                            help="(required) Report files (glob): .avro, .jsonl or .parquet, "
                                 "optionally .gz.")
        parser.add_argument("--output", default=None,
                            help="(required) Output directory: heavy_hitters.json, "
                                 "dead_letters/.")
        parser.add_argument("--k", type=int, default=None,
                            help="(required) Top-k size: every stage keeps k prefixes.")
        parser.add_argument("--bits", type=int, default=None,
                            help="(required) m: the width of the values, in [1, 64].")
        parser.add_argument("--query_limit", type=int, default=None,
                            help="Q: the most candidates one stage may estimate "
                                 "(default 2**20, seed 002's).")
        parser.add_argument("--start_bits", type=int, default=None,
                            help="gamma: default ceil(log2 k).")
        parser.add_argument("--step_bits", type=int, default=None,
                            help="eta: default the largest with k * 2**eta <= Q.")
        parser.add_argument("--num_groups", type=int, default=None,
                            help="g: default ceil((bits - start_bits) / step_bits); when "
                                 "given it must agree.")
        parser.add_argument("--threshold", type=float, default=None,
                            help="Threshold variant: stages keep only prefixes of estimated "
                                 "frequency >= THRESHOLD (still at most k).")
        parser.add_argument("--codec", choices=("int", "string"), default="int",
                            help="How values were encoded: int (m-bit integers) or string "
                                 "(the first m/8 UTF-8 bytes); the output decodes them.")
        parser.add_argument("--epsilon", type=float, default=None,
                            help="Refuse (dead-letter) reports made with any other epsilon "
                                 "(default: each epsilon in the input is its own result).")
        parser.add_argument("--input_format", choices=("avro", "json", "parquet"),
                            default=None,
                            help="Format of every input file (default: from each file's name).")


def require(options: PipelineOptions, *names: str, prog: str = "ldpflow") -> None:
    """Exit with a usage error naming every required flag that is missing."""
    missing = [f"--{name}" for name in names if getattr(options, name, None) in (None, "")]
    if missing:
        raise SystemExit(
            f"{prog}: error: the following arguments are required: {', '.join(missing)}")
