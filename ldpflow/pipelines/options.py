"""Pipeline options: one ``PipelineOptions`` subclass per job family; flags are snake_case."""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from ldpflow.core.oracles import registry

__all__ = ["EstimateOptions", "StreamOptions", "DEFAULT_METHODS", "require"]

DEFAULT_METHODS = "base,base-pos,base-cut,norm,norm-sub,mle-apx,power-ns"


class EstimateOptions(PipelineOptions):
    """Flags of ``ldpflow estimate``."""

    @classmethod
    def _add_argparse_args(cls, parser):
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
        parser.add_argument("--expect_oracle", choices=sorted(registry.ORACLES), default=None,
                            help="Refuse (dead-letter) reports of any other oracle.")
        parser.add_argument("--expect_epsilon", type=float, default=None,
                            help="Refuse reports made with any other epsilon.")
        parser.add_argument("--expect_domain_size", type=int, default=None,
                            help="Refuse reports of any other domain size.")


class StreamOptions(PipelineOptions):
    """Flags of ``ldpflow stream`` (windowed estimates from Pub/Sub)."""

    @classmethod
    def _add_argparse_args(cls, parser):
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


def require(options: PipelineOptions, *names: str) -> None:
    """Exit with a usage error naming every required flag that is missing."""
    missing = [f"--{name}" for name in names if getattr(options, name, None) in (None, "")]
    if missing:
        raise SystemExit(f"error: the following arguments are required: {', '.join(missing)}")
