"""The ``ldpflow`` command line: ``ldpflow <command> [flags]``.

Commands
--------
demo, simulate, estimate, stream, heavy-hitters, pubsub, audit, report: their one-line
summaries, option groups and flags are declared once, in :mod:`ldpflow.pipelines.options`,
which every command parses with (``ldpflow --help`` lists them). Run ``ldpflow COMMAND
--help`` for a command's flags. Exit status: 0 done, 1 the job failed, 2 a usage error (one
line).
"""

from __future__ import annotations

import logging
import sys

__all__ = ["main"]


# The modules each command needs beyond numpy and scipy, and the extra that installs them.
_NEEDS = {"apache_beam": "beam", "fastavro": "beam", "pyarrow": "beam", "polars": "beam",
          "cramjam": "beam", "google": "gcp", "matplotlib": "plot"}


def _job(command: str, module: str, judged: bool = False):
    """``ldpflow COMMAND``: parse its flags first (:func:`ldpflow.pipelines.options.parse`:
    ``--help`` and usage errors import neither the job nor Beam), then run the job module's
    ``run`` on them. A judged batch job is then judged (``ldpflow.pipelines.verdict``):
    status 1 and one line when it failed."""

    def run(argv: list[str]) -> int:
        import importlib

        from ldpflow.pipelines.options import parse

        parsed = parse(command, argv)
        result = importlib.import_module(f"ldpflow.pipelines.{module}").run(parsed)
        if not judged:
            return result if isinstance(result, int) else 0
        from ldpflow.pipelines.verdict import verdict

        failure = verdict(result, parsed.args.max_dead_letter_fraction)
        if failure:
            print(f"ldpflow {command}: {failure}", file=sys.stderr)
            return 1
        return 0

    run.__name__ = f"_{module}"
    return run


COMMANDS = {
    "demo": _job("demo", "demo"),
    "simulate": _job("simulate", "simulate"),
    "estimate": _job("estimate", "estimate", judged=True),
    "stream": _job("stream", "stream"),
    "heavy-hitters": _job("heavy-hitters", "heavy_hitters", judged=True),
    "pubsub": _job("pubsub", "pubsub"),
    "audit": _job("audit", "audit"),
    "report": _job("report", "report"),
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


def _top_help() -> str:
    from ldpflow.pipelines.options import COMMANDS

    width = max(map(len, COMMANDS))
    lines = "\n".join(f"  {name:<{width}}  {command.summary}"
                      for name, command in COMMANDS.items())
    return ("usage: ldpflow [--version] COMMAND [FLAGS]\n\n"
            "Local differential privacy: frequency estimation and heavy hitters, on Apache "
            f"Beam.\n\ncommands:\n{lines}\n\nRun 'ldpflow COMMAND --help' for a command's "
            "flags.\n")


def main(argv: list[str] | None = None) -> int:
    """The ``ldpflow`` command: returns the exit status (0 done, 1 the job failed, 2 usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help(), end="")
        return 0 if argv else 2
    if argv[0] == "--version":
        from ldpflow import __version__  # the package imports its core API lazily

        print(f"ldpflow {__version__}")
        return 0
    command = argv[0]
    if command not in COMMANDS:
        import difflib

        close = difflib.get_close_matches(command, list(COMMANDS), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else " (see ldpflow --help)"
        what = "flag" if command.startswith("-") else "command"
        print(f"ldpflow: error: unknown {what} {command!r}{hint}", file=sys.stderr)
        return 2
    _configure_logging()
    from ldpflow.pipelines.usage import JobFailed

    try:
        return COMMANDS[command](argv[1:])
    except JobFailed as exc:
        print(exc, file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        message = _missing_extra(command, exc)
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
