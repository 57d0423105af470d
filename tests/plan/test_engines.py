"""One job, four engines: the same hostile files give the same counts and the same outputs
on Beam (FnApiRunner), the in-process plan, Dask (a LocalCluster of 2 worker processes)
and Spark (2 executors).

The fields that differ by design are the run's times and what ran it:
``run.started``, ``run.finished`` and ``run.runner`` of ``estimates.json``. Everything else
of ``estimates.json`` is compared byte for byte, the dead-letter files too, and the Avro
records one by one.
"""

from __future__ import annotations

import glob
import json
import os
import shutil

import fastavro
import numpy as np
import pytest

import ldpflow
from ldpflow.pipelines import estimate
from ldpflow.plan.steps import key_memory
from tests.plan import inputs

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

#: The run-time fields of estimates.json (times, and the engine's name).
RUN_TIME_FIELDS = ("started", "finished", "runner")
#: A job budget that admits the OLH key (the most reports) and refuses the GRR one.
BUDGET = key_memory(ldpflow.oracle("olh", epsilon=1.0, domain_size=64).key) + 1
CONFIGS = {"dedup": [], "cap": ["--max_reports_per_user=2"],
           "budget": [f"--max_job_bytes={BUDGET}"], "poisoning": ["--poisoning=detect"],
           "cap-poisoning": ["--max_reports_per_user=2", "--poisoning=detect"]}
#: The configurations whose counts (not only outputs) the plan engines are compared on.
COUNT_CONFIGS = ("budget", "cap", "dedup")
#: Spark's two executors: a local cluster of 2 workers (1 core, 1 GiB each).
SPARK_MASTER = os.environ.get("LDPFLOW_TEST_SPARK_MASTER", "local-cluster[2,1,1024]")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return inputs.write_inputs(tmp_path_factory.mktemp("inputs"))


@pytest.fixture(scope="module")
def dask_backend():
    pytest.importorskip("distributed", reason="needs the dask extra: pip install 'ldpflow[dask]'")
    from ldpflow.engines.dask_backend import DaskBackend

    with DaskBackend(workers=2) as backend:
        yield backend


@pytest.fixture(scope="module")
def spark_backend():
    pytest.importorskip("pyspark", reason="needs the spark extra: pip install 'ldpflow[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs a Java runtime (Debian's openjdk-17; .ci/run installs it)")
    from ldpflow.engines.spark_backend import SparkBackend

    with SparkBackend(SPARK_MASTER) as backend:
        yield backend


def _backend(request, engine):
    return {"beam": None, "local": None}.get(engine) if engine in ("beam", "local") else \
        request.getfixturevalue(f"{engine}_backend")


def _outputs(folder):
    with open(f"{folder}/estimates.json", "rb") as f:
        raw = f.read()
    document = json.loads(raw)
    assert raw == json.dumps(document, indent=1).encode("utf-8")  # the bytes are this dump
    for name in RUN_TIME_FIELDS:
        document["run"][name] = None
    letters = {os.path.basename(p): open(p, "rb").read()
               for p in glob.glob(f"{folder}/dead_letters/*.jsonl")}
    with open(f"{folder}/estimates.avro", "rb") as f:
        records = list(fastavro.reader(f))
    return json.dumps(document, indent=1).encode("utf-8"), letters, records


@pytest.fixture(scope="module")
def runs(files, tmp_path_factory):
    """engine -> config -> (summary, outputs); filled as the tests run."""
    return {"folder": tmp_path_factory.mktemp("outputs")}


def _run(request, runs, files, engine, config):
    key = (engine, config)
    if key not in runs:
        output = runs["folder"] / f"{engine}-{config}"
        argv = [f"--input={files}", f"--output={output}", "--methods=base,norm-sub",
                f"--engine={engine}", *CONFIGS[config]]
        summary = estimate.run(argv, backend=_backend(request, engine))
        runs[key] = summary, _outputs(output)
    return runs[key]


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_beam_counts_what_the_files_hold(request, runs, files, config):
    summary, (document, letters, _) = _run(request, runs, files, "beam", config)
    doc = json.loads(document)
    broken = inputs.BROKEN_AVRO + inputs.BROKEN_JSON
    total = inputs.OLH_REPORTS + inputs.GRR_REPORTS + inputs.EXACT_COPIES + \
        inputs.CONFLICTING_COPIES
    assert summary["records"] == doc["records"] == total
    refused = inputs.GRR_REPORTS if config == "budget" else 0  # one letter of 300 reports
    assert summary["dead_letters"] == broken + refused == sum(
        json.loads(line)["count"] for v in letters.values() for line in v.splitlines())
    assert summary["duplicates"] == inputs.EXACT_COPIES + inputs.CONFLICTING_COPIES
    if config == "budget":
        assert [r["oracle"] for r in doc["results"]] == ["olh"]
        assert summary["reports_estimated"] == total - broken - refused - summary["duplicates"]
    elif config.startswith("cap"):  # 300 users of 3 OLH and 2 GRR reports (fewer where refused)
        assert summary["capped"] > 0 and doc["contribution"]["users"] == 300
        assert summary["reports_estimated"] == 2 * 300
    else:
        assert summary["capped"] == 0
        assert summary["reports_estimated"] == total - broken - summary["duplicates"]
    if config.endswith("poisoning"):  # both keys' oracles are covered: each result has a section
        sections = [r["poisoning"] for r in doc["results"]]
        assert [s["n"] for s in sections] == [r["n"] for r in doc["results"]]
        assert all(s["n"] > 0 and "error" not in s for s in sections)
    else:
        assert all("poisoning" not in r for r in doc["results"])


@pytest.mark.parametrize("engine", ["local", "dask", "spark"])
@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_engine_gives_beams_counts_and_outputs(request, runs, files, engine, config):
    beam_summary, beam_out = _run(request, runs, files, "beam", config)
    summary, out = _run(request, runs, files, engine, config)
    for name in ("records", "reports_estimated", "duplicates", "capped", "dead_letters"):
        assert summary[name] == beam_summary[name], name
    document, letters, records = out
    assert json.loads(document)["dead_letters"] == json.loads(beam_out[0])["dead_letters"]
    assert document == beam_out[0]  # byte-identical but for the run-time fields
    # a.avro and b.jsonl.gz (and the input pattern's, for the key refused by the budget)
    assert letters == beam_out[1] and len(letters) == (3 if config == "budget" else 2)
    assert records == beam_out[2]


@pytest.mark.parametrize("config", COUNT_CONFIGS)
def test_plan_engines_give_identical_integer_accumulators(request, files, config, tmp_path):
    from ldpflow.pipelines.common import acceptance_policy, job_options
    from ldpflow.plan.backend import LocalBackend
    from ldpflow.plan.job import EstimateJob, count_reports

    _, args = job_options("estimate", [f"--input={files}", "--output=x", *CONFIGS[config]])
    job = EstimateJob(input=files, output=str(tmp_path), methods=("base",),
                      policy=acceptance_policy(args, "test"),
                      max_reports_per_user=args.max_reports_per_user,
                      max_job_bytes=args.max_job_bytes)
    counted = {}
    for engine in ("local", "dask", "spark"):
        backend = LocalBackend() if engine == "local" else _backend(request, engine)
        counted[engine] = count_reports(backend, job, str(tmp_path / f"staging-{engine}"))
    local = counted["local"]
    assert {key[0] for key in local.tallies} == ({"olh"} if config == "budget" else
                                                 {"olh", "grr"})
    for engine in ("dask", "spark"):
        other = counted[engine]
        assert other.records == local.records and other.reasons == local.reasons
        assert other.contribution == local.contribution
        assert other.tallies.keys() == local.tallies.keys()
        for key, tally in local.tallies.items():
            theirs = other.tallies[key]
            assert (theirs.duplicates, theirs.conflicting, theirs.dead_letters,
                    theirs.capped) == (tally.duplicates, tally.conflicting, tally.dead_letters,
                                       tally.capped)
            assert theirs.accumulator.n == tally.accumulator.n
            assert theirs.accumulator.counts.dtype.kind == "i"
            assert np.array_equal(theirs.accumulator.counts, tally.accumulator.counts)
