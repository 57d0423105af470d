"""The JavaScript client (``clients/js``) passes its own test suite under node's test runner.

That suite checks the client against ``docs/testvectors`` bit for bit, the law of each
oracle's reports, the package (``npm pack``, an offline install, ``import`` and ``require``,
TypeScript) and, end to end, ``ldpflow estimate``, ``heavy-hitters --protocol P`` (pem, spm,
mcm, treehist, sfp) and ``audit`` on the client's JSON lines (with this Python environment's
``ldpflow``). The heavy-hitter vectors the client replays are checked here against ldpflow.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from ldpflow.core import codecs
from ldpflow.core import heavy_hitters as hh
from ldpflow.core.randomness import SplitMix64Source

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLIENT = ROOT / "clients" / "js"
VECTORS = ROOT / "docs" / "testvectors"
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
                            text=True, timeout=900)
    summary = [line for line in result.stdout.splitlines()
               if line.startswith(("# tests", "# pass", "# fail", "# skipped"))]
    assert result.returncode == 0, (
        "node --test failed in clients/js:\n" + result.stdout[-6000:] + result.stderr[-2000:])
    assert any(line.startswith("# fail 0") for line in summary), summary


def test_heavy_hitter_vectors_are_ldpflows_reports():
    cases = json.loads((VECTORS / "heavy_hitter_reports.json").read_text())
    assert {(c["protocol"], c["codec"]) for c in cases} == {
        (name, codec) for name in hh.PROTOCOLS for codec in ("int", "string")}
    assert {c["parameters"].get("group_hash", 1) for c in cases} == set(hh.GROUP_HASHES)
    for case in cases:
        parameters = {k: int(v) if k.endswith("_seed") else v
                      for k, v in case["parameters"].items()}
        parameters.setdefault("group_hash", 1)  # a case that names no version: version 1
        protocol = hh.PROTOCOLS[case["protocol"]](**parameters)
        if case["codec"] == "string":
            code = int(codecs.StringCodec(bits=protocol.value_bits).encode([case["value"]])[0])
        else:
            code = int(case["value"])
        assert str(code) == case["code"]
        reports = protocol.perturb(np.array([code], dtype=np.uint64), [case["user_id"]],
                                   SplitMix64Source(case["client_seed"]))
        (report,) = reports.to_records()
        wire = {k: v.hex() if isinstance(v, bytes) else str(v) if v >= 2**53 else v
                for k, v in report.items()}
        assert wire == case["report"], case
        assert report["group"] == int(hh.assign_groups(
            [case["user_id"]], protocol.num_groups, group_hash=protocol.group_hash)[0])


def test_make_test_vectors_writes_the_published_files(tmp_path):
    script = ROOT / "scripts" / "make_test_vectors.py"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, str(script), "--output", str(tmp_path)], check=True, env=env,
                   timeout=300)
    for name in ("hash_family.json", "client_reports.json", "heavy_hitter_reports.json",
                 "group_hash.json"):
        assert (tmp_path / name).read_bytes() == (VECTORS / name).read_bytes(), name
