"""Flex Template entry point: ``ldpflow $LDPFLOW_JOB`` with the template's parameters.

The launcher runs ``python main.py --name=value ...`` (the template's parameters plus the
runner options); the launcher image sets ``LDPFLOW_JOB`` (estimate, stream or
heavy-hitters). Nothing else lives here: the jobs are the package's.
"""

import os
import sys

from ldpflow.pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main([os.environ["LDPFLOW_JOB"], *sys.argv[1:]]))
