"""The ``ldpflow`` command line: ``ldpflow <command> [flags]``.

Commands
--------
demo
    Simulate users on built-in Zipf data, perturb with every oracle, estimate, and print
    true vs estimated frequencies of the top values.
"""

from __future__ import annotations

import argparse
import logging
import sys

__all__ = ["main"]


def _demo(argv: list[str]) -> int:
    from ldpflow.pipelines import demo

    return demo.run(argv)


COMMANDS = {"demo": _demo}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="ldpflow", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=sorted(COMMANDS))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    args = parser.parse_args(argv[:1])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return COMMANDS[args.command](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
