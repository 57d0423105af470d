"""Pipeline options: one ``PipelineOptions`` subclass per job family; flags are snake_case."""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from ldpflow.core.oracles import registry

__all__ = ["EstimateOptions", "DEFAULT_METHODS", "require"]

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


def require(options: PipelineOptions, *names: str) -> None:
    """Exit with a usage error naming every required flag that is missing."""
    missing = [f"--{name}" for name in names if getattr(options, name, None) in (None, "")]
    if missing:
        raise SystemExit(f"error: the following arguments are required: {', '.join(missing)}")
