"""Command-line conventions shared by every command (no Beam): help text and usage errors.

A usage error is a ``SystemExit`` whose code is one line, ``ldpflow JOB: error: ...``; the
CLI prints it and exits with status 2, argparse's convention. A job that cannot give a
result for reasons of its input (:class:`JobFailed`) is one line too, with status 1.
"""

from __future__ import annotations

import argparse

__all__ = ["HelpFormatter", "JobFailed", "Parser", "usage_error"]


class JobFailed(Exception):
    """The job cannot give a result for what its input holds (the CLI: one line, exit 1)."""

    def __init__(self, prog: str, message: str):
        super().__init__(f"{prog}: {message}")


def usage_error(prog: str, message: str) -> SystemExit:
    """The one-line usage error of ``prog`` (raise it)."""
    return SystemExit(f"{prog}: error: {message}")


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one-line usage errors (see module docstring)."""

    def error(self, message):
        raise usage_error(self.prog, message)


class HelpFormatter(argparse.HelpFormatter):
    """Marks required flags and shows each flag's default (unless it is None or False)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.required:
            return f"{text} (required)".strip()
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text
