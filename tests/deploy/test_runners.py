"""The runners ``deploy/README.md`` supports on one machine, run: Beam's Python FnApiRunner
in-process (the default) and on worker processes (``deploy/direct/batch.flags``, the
Kubernetes CronJob's default flags); Beam's DaskRunner is refused before anything runs.

Counts are integers and every estimate is a deterministic function of them, so worker
processes that split the reports differently must still write the same documents, float for
float (compared with ``==``).
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

from ldpflow.pipelines import cli, estimate, heavy_hitters
from tests.deploy.conftest import PEM_DAY, PEM_FLAGS

pytestmark = pytest.mark.pipeline

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METHODS = "base,norm-sub,base-cut"


def dead_letters(output: str) -> list[str]:
    return sorted(line for path in glob.glob(f"{output}/dead_letters/*.jsonl")
                  for line in open(path, encoding="utf-8"))


def without_timings(value):
    """The document without its wall-clock fields (``*_seconds``, ``started``, ``finished``),
    which no two runs share."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items()
                if not k.endswith("_seconds") and k not in ("started", "finished")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def sdk_workers_started(log: str) -> int:
    """How many SDK worker processes a run's log says were started (in-process runs: 0)."""
    return log.count("Python sdk harness starting.")


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def cli_env(**env: str) -> dict[str, str]:
    """The environment of a subprocess that runs this environment's ``ldpflow`` command."""
    bin_dir = pathlib.Path(sys.executable).parent
    keep = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**keep, "PATH": f"{bin_dir}:{os.environ['PATH']}", **env}


@pytest.fixture(scope="module")
def in_process(reports, tmp_path_factory):
    output = str(tmp_path_factory.mktemp("in_process"))
    counts = estimate.run([f"--input={reports}/*/reports-*", f"--output={output}",
                           f"--methods={METHODS}", "--engine=beam"])  # Beam, in process
    return counts, output


def test_in_process_reference_counts_every_record(in_process):
    counts, output = in_process
    document = read_json(f"{output}/estimates.json")
    by_oracle = {r["oracle"]: r for r in document["results"]}
    assert {k: by_oracle[k]["n"] for k in ("grr", "olh", "hr")} == {
        "grr": 3000, "olh": 2000, "hr": 1500}
    assert by_oracle["oue"]["n"] == 397  # 400 records, 3 of them refused
    assert document["dead_letters"]["total"] == 4  # ... and one line that is not JSON
    assert counts["records"] == document["records"] == 3000 + 2000 + 1500 + 400 + 1
    assert counts["dead_letters"] == 4


@pytest.mark.slow
def test_estimate_on_worker_processes_equals_in_process(reports, in_process, tmp_path):
    """``deploy/launch.sh deploy/direct/batch.flags estimate ...`` with 2 worker processes."""
    _, expected = in_process
    proc = subprocess.run(
        [str(DEPLOY / "launch.sh"), str(DEPLOY / "direct/batch.flags"), "estimate",
         f"--input={reports}/*/reports-*", f"--output={tmp_path}/out", f"--methods={METHODS}"],
        env=cli_env(DIRECT_NUM_WORKERS="2"), capture_output=True, text=True,
        timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sdk_workers_started(proc.stderr) == 2
    # n, dead letters and every float, exactly
    assert without_timings(read_json(f"{tmp_path}/out/estimates.json")) == without_timings(
        read_json(f"{expected}/estimates.json"))
    assert dead_letters(f"{tmp_path}/out") == dead_letters(expected)


@pytest.mark.slow
def test_kubernetes_cronjob_default_flags_run_heavy_hitters(pem_reports, tmp_path):
    """The CronJob's script, with its ConfigMap's RUNNER_FLAGS (worker processes in the pod),
    run with the real ``ldpflow``: the same document as an in-process run."""
    config_map, cron = yaml.safe_load_all((DEPLOY / "kubernetes/heavy-hitters-cronjob.yaml")
                                          .read_text())
    (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    flags = dict(flag.lstrip("-").split("=", 1) for flag in PEM_FLAGS)
    env = cli_env(**{**config_map["data"], "REPORTS": pem_reports, "OUTPUT": f"{tmp_path}/hh",
                     "K": flags["k"], "BITS": flags["bits"], "EPSILON": "4.0",
                     "LDPFLOW_DATE": PEM_DAY})
    proc = subprocess.run([*container["command"], container["args"][0]], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    workers = int(container["resources"]["requests"]["cpu"])
    assert sdk_workers_started(proc.stderr) == workers > 1
    document = read_json(f"{tmp_path}/hh/dt={PEM_DAY}/heavy_hitters.json")
    heavy_hitters.run([f"--input={pem_reports}/dt={PEM_DAY}/*.avro", *PEM_FLAGS,
                       "--expect_epsilon=4.0", f"--output={tmp_path}/in_process",
                       "--engine=beam"])  # Beam, in process
    expected = read_json(f"{tmp_path}/in_process/heavy_hitters.json")
    assert len(expected["top_k"]) == 8 and expected["records"] == 6000 + 300 + 2
    assert expected["dead_letters"]["total"] == 300 + 2
    # values, integer counts, frequencies and stages, exactly
    assert without_timings(document) == without_timings(expected)
    assert dead_letters(f"{tmp_path}/hh/dt={PEM_DAY}") == dead_letters(f"{tmp_path}/in_process")


@pytest.mark.parametrize("job", ["estimate", "heavy-hitters"])
@pytest.mark.parametrize("runner", ["DaskRunner",
                                    "apache_beam.runners.dask.dask_runner.DaskRunner"])
def test_dask_runner_is_refused_before_anything_runs(job, runner, reports, pem_reports,
                                                     tmp_path, capsys):
    inputs = {"estimate": [f"--input={reports}/*/reports-*"],
              "heavy-hitters": [f"--input={pem_reports}/dt={PEM_DAY}/*.avro", *PEM_FLAGS]}
    assert cli.main([job, *inputs[job], f"--output={tmp_path}/out", f"--runner={runner}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert f"ldpflow {job}: error: --runner={runner} is not supported" in line
    assert "--direct_running_mode=multi_processing" in line
    assert not (tmp_path / "out").exists()

