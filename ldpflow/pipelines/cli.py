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
    Heavy-hitter reports -> the most frequent values of a huge domain (Apache Beam).
pubsub
    Pub/Sub emulator helpers: create a topic and subscription, publish report files.
audit
    An empirical lower bound on a client's epsilon, from reports of known inputs.
report
    An estimates document -> one self-contained HTML page.

Run ``ldpflow COMMAND --help`` for a command's flags.
"""

from __future__ import annotations

import argparse
import logging
import sys

from ldpflow.core.registry import HEAVY_HITTER, names

__all__ = ["main"]


_SUMMARIES = {
    "demo": "The main job on built-in data: simulate, estimate, print and plot the top values.",
    "simulate": "Synthetic users -> perturbed report files and truth.json.",
    "estimate": "Report files -> consistent frequency estimates (Apache Beam).",
    "stream": "Reports from Pub/Sub -> windowed consistent estimates (Apache Beam).",
    "heavy-hitters": (f"Heavy-hitter reports ({' '.join(names(HEAVY_HITTER))}) -> the most "
                      "frequent values of a huge domain (Apache Beam)."),
    "pubsub": "Pub/Sub emulator helpers: create a topic and subscription, publish reports.",
    "audit": "An empirical lower bound on a client's epsilon, from reports of known inputs.",
    "report": "An estimates document -> one self-contained HTML page.",
}

# The modules each command needs beyond numpy and scipy, and the extra that installs them.
_NEEDS = {"apache_beam": "beam", "fastavro": "beam", "pyarrow": "beam", "polars": "beam",
          "cramjam": "beam", "google": "gcp", "matplotlib": "plot"}


def _demo(argv: list[str]) -> int:
    from ldpflow.pipelines import demo

    return demo.run(argv)


def _simulate(argv: list[str]) -> int:
    from ldpflow.pipelines import simulate

    simulate.run(argv)
    return 0


def _judged(job: str, run, argv: list[str]) -> int:
    """Run a batch job, then judge it (``ldpflow.pipelines.verdict``): status 1 and one line
    when it failed."""
    from ldpflow.pipelines.common import job_options
    from ldpflow.pipelines.verdict import verdict

    summary = run(argv)
    failure = verdict(summary, job_options(job, argv)[1].max_dead_letter_fraction)
    if failure:
        print(f"ldpflow {job}: {failure}", file=sys.stderr)
        return 1
    return 0


def _estimate(argv: list[str]) -> int:
    from ldpflow.pipelines import estimate

    return _judged("estimate", estimate.run, argv)


def _stream(argv: list[str]) -> int:
    from ldpflow.pipelines import stream

    stream.run(argv)
    return 0


def _heavy_hitters(argv: list[str]) -> int:
    from ldpflow.pipelines import heavy_hitters

    return _judged("heavy-hitters", heavy_hitters.run, argv)


def _pubsub(argv: list[str]) -> int:
    from ldpflow.pipelines import pubsub

    return pubsub.run(argv)


def _report(argv: list[str]) -> int:
    from ldpflow.pipelines import report

    return report.run(argv)


def _audit(argv: list[str]) -> int:
    from ldpflow.pipelines import audit

    return audit.run(argv)


COMMANDS = {
    "demo": _demo,
    "simulate": _simulate,
    "estimate": _estimate,
    "stream": _stream,
    "heavy-hitters": _heavy_hitters,
    "pubsub": _pubsub,
    "audit": _audit,
    "report": _report,
}


def _missing_extra(command: str, exc: ModuleNotFoundError) -> str | None:
    """The one-line message for a command whose optional dependency is not installed."""
    root = (exc.name or "").split(".")[0]
    extra = _NEEDS.get(root)
    if extra is None:
        return None
    return (f"ldpflow {command}: needs the Python module {root!r}, which is not installed: "
            f"pip install 'ldpflow[{extra}]'")


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


def _top_parser() -> argparse.ArgumentParser:
    from ldpflow import __version__

    width = max(map(len, COMMANDS))
    lines = "\n".join(f"  {name:<{width}}  {_SUMMARIES[name]}" for name in COMMANDS)
    parser = argparse.ArgumentParser(
        prog="ldpflow",
        description="Local differential privacy: frequency estimation and heavy hitters, "
                    "on Apache Beam.",
        usage="ldpflow [--version] COMMAND [FLAGS]",
        epilog=f"commands:\n{lines}\n\nRun 'ldpflow COMMAND --help' for a command's flags.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"ldpflow {__version__}")
    parser.add_argument("command", choices=list(COMMANDS), metavar="COMMAND",
                        help="One of the commands below.")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``ldpflow`` command: returns the exit status (0 done, 1 the job failed, 2 usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _top_parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    try:
        args = parser.parse_args(argv[:1])
    except SystemExit as exc:
        return int(exc.code or 0)
    _configure_logging()
    from ldpflow.pipelines.usage import JobFailed

    try:
        return COMMANDS[args.command](argv[1:])
    except JobFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        message = _missing_extra(args.command, exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2
    except SystemExit as exc:  # a usage error: one line, status 2 (argparse's convention)
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
