"""Command-line conventions shared by every command (no Beam): help text and usage errors.

A usage error is a ``SystemExit`` whose code is one line, ``ldpflow JOB: error: ...``; the
CLI prints it and exits with status 2, argparse's convention. A job that cannot give a
result for reasons of its input (:class:`JobFailed`) is one line too, with status 1.
"""

from __future__ import annotations

import argparse

__all__ = ["HelpFormatter", "JobFailed", "Parser", "usage_error", "check_output",
           "check_output_file"]


class JobFailed(Exception):
    """The job cannot give a result for what its input holds (the CLI: one line, exit 1)."""

    def __init__(self, prog: str, message: str):
        super().__init__(f"{prog}: {message}")


def usage_error(prog: str, message: str) -> SystemExit:
    """The one-line usage error of ``prog`` (raise it)."""
    return SystemExit(f"{prog}: error: {message}")


def check_output(output: str, prog: str, *, flag: str = "--output",
                 dead_letters: bool = True) -> None:
    """Refuse, as a usage error, an output folder the job cannot or must not write to
    (:func:`ldpflow.wire.outputs.check_output`); call it before the job does any work."""
    from ldpflow.wire import outputs

    try:
        outputs.check_output(output, flag=flag, dead_letters=dead_letters)
    except outputs.OutputError as exc:
        raise usage_error(prog, str(exc)) from None


def check_output_file(path: str, prog: str, *, flag: str = "--output") -> None:
    """Refuse, as a usage error, an output file the job cannot write
    (:func:`ldpflow.wire.outputs.check_output_file`)."""
    from ldpflow.wire import outputs

    try:
        outputs.check_output_file(path, flag=flag)
    except outputs.OutputError as exc:
        raise usage_error(prog, str(exc)) from None


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one-line usage errors (see module docstring),
    ending with a pointer to ``--help`` unless they name the flag meant."""

    def error(self, message):
        if "did you mean" not in message and "--help" not in message:
            message = f"{message} (see {self.prog} --help)"
        raise usage_error(self.prog, message)


class HelpFormatter(argparse.HelpFormatter):
    """Marks required flags and shows each flag's default (unless it is None or False, or
    the help already says it)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.required:
            return f"{text} (required)".strip()
        if (action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text
                and "(default" not in text):  # a default told in words is not told twice
            text += " (default: %(default)s)"
        return text
