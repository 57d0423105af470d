"""The JavaScript client (``clients/js``) passes its own test suite under node's test runner.

That suite checks the client against ``docs/testvectors`` bit for bit, the law of each
oracle's reports, and, end to end, ``ldpflow estimate``, ``heavy-hitters`` and ``audit`` on
the client's JSON lines (with this Python environment's ``ldpflow``).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "js"
#: node's test runner with describe/skip and diagnostics as the suite uses them.
MIN_NODE_MAJOR = 20


def _node_major(node: str) -> int:
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True)
    match = re.match(r"v(\d+)\.", version.stdout.strip())
    return int(match.group(1)) if match else 0


@pytest.mark.slow
def test_js_client_suite_passes():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the JavaScript client's tests need Node >= 20")
    if _node_major(node) < MIN_NODE_MAJOR:
        pytest.skip(f"node {MIN_NODE_MAJOR} or later is needed, found {node} "
                    f"v{_node_major(node)}")
    env = dict(os.environ)
    bin_dir = pathlib.Path(sys.executable).parent
    if (bin_dir / "ldpflow").exists():  # the end-to-end tests use this environment's ldpflow
        env["LDPFLOW_VENV_BIN"] = str(bin_dir)
    result = subprocess.run([node, "--test"], cwd=CLIENT, env=env, capture_output=True,
                            text=True, timeout=600)
    summary = [line for line in result.stdout.splitlines()
               if line.startswith(("# tests", "# pass", "# fail", "# skipped"))]
    assert result.returncode == 0, (
        "node --test failed in clients/js:\n" + result.stdout[-6000:] + result.stderr[-2000:])
    assert any(line.startswith("# fail 0") for line in summary), summary
