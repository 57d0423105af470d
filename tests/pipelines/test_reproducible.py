"""Every output (simulate, estimate, heavy-hitters, report) is byte-identical across reruns
of the same inputs, in fresh processes whose
string hash seeds differ; only the fields that are by design the run's time may differ
(``docs/pipeline.md``, "Reruns write the same bytes"), and none of them is in an Avro file."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
#: The fields that are the run's time (JSON documents only): document -> paths.
TIMES = {"estimates.json": [("run", "started"), ("run", "finished")],
         "heavy_hitters.json": [("elapsed_seconds",)], "report.html": []}
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")

SCRIPT = """
import sys
from ldpflow.pipelines.cli import main
work = sys.argv[1]
def ok(*argv):
    assert main(list(argv)) == 0, argv
ok("simulate", "--oracle=olh", "--epsilon=1", "--domain_size=32", "--users=3000", "--seed=4",
   "--shards=2", f"--output={work}/reports")
ok("simulate", "--oracle=grr", "--epsilon=1", "--domain_size=8", "--users=500", "--seed=4",
   "--shards=1", "--format=parquet", f"--output={work}/more")
ok("simulate", "--oracle=pem", "--bits=12", "--k=4", "--epsilon=4", "--domain_size=50",
   "--users=4000", "--seed=4", "--shards=2", f"--output={work}/pem")
with open(f"{work}/reports/junk.jsonl", "w") as f:
    f.write('{"oracle": "nope"}\\n{"oracle": "grr", "epsilon": 1}\\n')
ok("estimate", f"--input={work}/reports/*.*[lo]", "--methods=base,norm-sub",
   f"--output={work}/estimates", "--engine=beam")
ok("estimate", f"--input={work}/more/*.parquet", "--methods=base",
   f"--output={work}/estimates-parquet", "--engine=beam")
ok("estimate", f"--input={work}/more/*.parquet", "--methods=base",
   f"--output={work}/estimates-default")
ok("heavy-hitters", f"--input={work}/pem/*.avro", f"--output={work}/hh", "--engine=beam")
ok("report", f"--input={work}/estimates", f"--heavy_hitters={work}/hh",
   f"--output={work}/report.html")
"""


def run_everything(work: Path, seed: int) -> None:
    env = {**os.environ, "PYTHONHASHSEED": str(seed),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(work)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def without_times(name: str, data: bytes):
    if name == "report.html":  # shows estimates.json's run.started and run.finished
        text, count = _ISO_TIME.subn("TIME", data.decode("utf-8"))
        assert count == 2, count
        return text
    document = json.loads(data)
    for path in TIMES[name]:
        into = document
        for key in path[:-1]:
            into = into[key]
        assert path[-1] in into, (name, path)  # the field is there, and differs by design
        del into[path[-1]]
    return document


def test_reruns_in_fresh_processes_write_identical_bytes(tmp_path):
    work = tmp_path / "work"
    run_everything(work, seed=1)
    first = contents(work)
    shutil.rmtree(work)  # the same paths again: the inputs' names are in the outputs
    run_everything(work, seed=2)
    second = contents(work)
    assert sorted(first) == sorted(second)
    assert any(name.startswith("estimates/dead_letters/") for name in first)
    assert any(name.endswith(".avro") for name in first) and "report.html" in first
    differ = sorted(name for name in first if first[name] != second[name])
    timed = [name for name in differ if Path(name).name in TIMES]
    assert differ == timed, differ  # only the documents that hold the run's time
    for name in timed:
        assert without_times(Path(name).name, first[name]) == \
            without_times(Path(name).name, second[name])
