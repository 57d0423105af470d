"""The ``ldpflow`` command line: ``ldpflow <command> [flags]``.

Commands
--------
demo
    The main job on built-in data: simulate, estimate on Beam, print and plot the top values.
simulate
    Synthetic users -> perturbed report files and truth.json.
estimate
    Report files -> consistent frequency estimates (Apache Beam).
stream
    Reports from Pub/Sub -> windowed consistent estimates (Apache Beam, streaming).
heavy-hitters
    PEM reports -> the most frequent values of a huge domain (Apache Beam).

Run ``ldpflow COMMAND --help`` for a command's flags.
"""

from __future__ import annotations

import argparse
import logging
import sys

__all__ = ["main"]


def _demo(argv: list[str]) -> int:
    from ldpflow.pipelines import demo

    return demo.run(argv)


def _simulate(argv: list[str]) -> int:
    from ldpflow.pipelines import simulate

    simulate.run(argv)
    return 0


def _estimate(argv: list[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from ldpflow.pipelines import estimate
    from ldpflow.pipelines.options import EstimateOptions

    document = estimate.run(argv)
    limit = PipelineOptions(argv).view_as(EstimateOptions).max_dead_letter_fraction
    failure = estimate.verdict(document, limit)
    if failure:
        print(f"ldpflow estimate: {failure}", file=sys.stderr)
        return 1
    return 0


def _stream(argv: list[str]) -> int:
    from ldpflow.pipelines import stream

    stream.run(argv)
    return 0


def _heavy_hitters(argv: list[str]) -> int:
    from ldpflow.pipelines import heavy_hitters

    heavy_hitters.run(argv)
    return 0


COMMANDS = {
    "demo": _demo,
    "simulate": _simulate,
    "estimate": _estimate,
    "stream": _stream,
    "heavy-hitters": _heavy_hitters,
}


_JOB_OPTIONS = {"estimate": "EstimateOptions", "stream": "StreamOptions",
                "heavy-hitters": "HeavyHittersOptions"}


def _job_help(command: str) -> None:
    """Print a Beam job's own flags (Beam's parser would only print a generic usage)."""
    from ldpflow.pipelines import options

    parser = argparse.ArgumentParser(
        prog=f"ldpflow {command}",
        epilog="Every Apache Beam pipeline option is accepted as well (--runner, --project, "
               "--region, --temp_location, --setup_file, --direct_num_workers, ...).")
    getattr(options, _JOB_OPTIONS[command])._add_argparse_args(parser)
    parser.print_help()


class _ImportNoise(logging.Filter):
    """Drops two warnings Beam logs on import about Google Cloud clients it does not need."""

    NOISE = ("apitools not found", "Failed to import GCSFileSystem")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(text in str(record.msg) for text in self.NOISE)


def _configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(_ImportNoise())
    # ldpflow reports progress at INFO; Beam's own INFO lines are runner internals.
    logging.getLogger("apache_beam").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="ldpflow", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=sorted(COMMANDS))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    args = parser.parse_args(argv[:1])
    _configure_logging()
    if args.command in _JOB_OPTIONS and {"-h", "--help"} & set(argv[1:]):
        _job_help(args.command)
        return 0
    try:
        return COMMANDS[args.command](argv[1:])
    except SystemExit as exc:  # a usage error: one line, status 2 (argparse's convention)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
