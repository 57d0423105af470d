"""The Pub/Sub clients the jobs use live in production code, not in ``ldpflow.testing``."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_no_production_module_imports_the_test_support():
    found = []
    for path in sorted((ROOT / "ldpflow").rglob("*.py")):
        if "testing" in path.relative_to(ROOT / "ldpflow").parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\b(from|import)\s+ldpflow\.testing\b", line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_the_client_module_imports_no_google_client_until_called():
    code = ("import sys, ldpflow.pipelines.pubsub_client as c\n"
            "assert c.emulator_answers('127.0.0.1:1', timeout=0.2) is False\n"
            "sys.exit(any(m.startswith('google.cloud') for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
