"""The batch jobs on Beam's DaskRunner, on 2 worker processes, equal the FnApiRunner exactly.

Counts are integers and every estimate is a deterministic function of them, so a runner that
splits, shuffles and merges the reports differently must still write the same documents,
float for float (compared with ``==``).
"""

from __future__ import annotations

import glob
import json
import os
import pathlib

import fastavro
import numpy as np
import pytest

import ldpflow
from ldpflow.pipelines import cli, estimate, runners, simulate
from tests import wire_support as formats
from tests.wire_support import reports_to_records

pytestmark = [pytest.mark.pipeline, pytest.mark.dask]

METHODS = "base,norm-sub,base-cut"


def executed_tasks(cluster) -> dict[str, int]:
    """Tasks each worker of ``cluster`` has executed so far, by worker address."""
    from dask.distributed import Client

    with Client(cluster.scheduler_address) as client:
        return client.run(lambda dask_worker: dask_worker.state.executed_count)


def dead_letters(output: str) -> list[str]:
    return sorted(line for path in glob.glob(f"{output}/dead_letters/*.jsonl")
                  for line in open(path, encoding="utf-8"))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Reports of three oracles in three formats, plus a file with broken records."""
    root = tmp_path_factory.mktemp("reports")
    for name, fmt, users in (("grr", "avro", 3000), ("olh", "json", 2000), ("hr", "parquet", 1500)):
        simulate.run(["--oracle", name, "--epsilon", "1.0", "--domain_size", "32",
                      "--users", str(users), "--seed", "11", "--shards", "3",
                      "--format", fmt, "--output", str(root / name)])
    oracle = ldpflow.oracle("oue", epsilon=2.0, domain_size=16)
    rng = np.random.default_rng(4)
    n = 400
    records = reports_to_records(oracle, oracle.perturb(rng.integers(0, 16, n), rng=rng),
                                 [f"b{i}" for i in range(n)], [f"v{i}" for i in range(n)],
                                 np.zeros(n, dtype=int))
    records[5] = dict(records[5], oracle="nope")
    records[6] = dict(records[6], epsilon=-1.0)
    records[7] = dict(records[7], bits=b"\x01")
    (root / "oue").mkdir()
    with open(root / "oue" / "reports-broken.jsonl", "w", encoding="utf-8") as f:
        formats.write_json_lines(f, records)
        f.write("{not json\n")
    return str(root)


@pytest.fixture(scope="module")
def on_fnapi(reports, tmp_path_factory):
    output = str(tmp_path_factory.mktemp("fnapi"))
    document = estimate.run([f"--input={reports}/*/reports-*", f"--output={output}",
                             f"--methods={METHODS}"])
    return document, output


def test_fnapi_reference_counts_every_record(on_fnapi):
    document, _ = on_fnapi
    by_oracle = {r["oracle"]: r for r in document["results"]}
    assert {k: by_oracle[k]["n"] for k in ("grr", "olh", "hr")} == {
        "grr": 3000, "olh": 2000, "hr": 1500}
    assert by_oracle["oue"]["n"] == 397  # 400 records, 3 of them refused
    assert document["dead_letters"]["total"] == 4  # ... and one line that is not JSON
    assert document["records"] == 3000 + 2000 + 1500 + 400 + 1


def test_estimate_on_dask_equals_fnapi(reports, on_fnapi, dask_cluster, tmp_path):
    expected, fnapi_output = on_fnapi
    before = executed_tasks(dask_cluster)
    document = estimate.run([
        f"--input={reports}/*/reports-*", f"--output={tmp_path}", f"--methods={METHODS}",
        "--runner=DaskRunner", f"--dask_client_address={dask_cluster.scheduler_address}",
        "--dask_npartitions=4",
    ])
    after = executed_tasks(dask_cluster)
    assert document == expected  # n, dead letters and every float, exactly
    with open(f"{tmp_path}/estimates.json", encoding="utf-8") as f:
        assert json.load(f) == expected
    assert dead_letters(str(tmp_path)) == dead_letters(fnapi_output)
    assert len(after) == 2 and all(after[w] > before.get(w, 0) for w in after), (before, after)


def test_cli_starts_and_closes_a_local_cluster(reports, on_fnapi, tmp_path):
    from dask.distributed import default_client

    expected, _ = on_fnapi
    assert cli.main(["estimate", f"--input={reports}/*/reports-*", f"--output={tmp_path}",
                     f"--methods={METHODS}", "--runner=DaskRunner",
                     "--dask_local_workers=2"]) == 0
    with open(os.path.join(tmp_path, "estimates.json"), encoding="utf-8") as f:
        assert json.load(f) == expected
    with pytest.raises(ValueError, match="No clients found"):
        default_client()  # the run's client is closed


@pytest.mark.parametrize("flags,message", [
    (["--dask_local_workers=0"], "must be a positive integer, got 0"),
    (["--runner=FnApiRunner", "--dask_local_workers=2"], "needs --runner=DaskRunner"),
    (["--dask_local_workers=2", "--dask_client_address=tcp://127.0.0.1:1"],
     "do not combine it with --dask_client_address"),
])
def test_bad_dask_flags_fail_before_any_cluster_starts(flags, message):
    from apache_beam.options.pipeline_options import PipelineOptions

    with pytest.raises(ValueError, match=message):
        runners.dask_runner(PipelineOptions(flags))


@pytest.mark.parametrize("flags,expected", [
    ([], False),
    (["--runner=FnApiRunner"], False),
    (["--runner=DaskRunner"], True),
    (["--runner=apache_beam.runners.dask.dask_runner.DaskRunner"], True),
    (["--dask_local_workers=2"], True),
])
def test_dask_is_chosen_only_when_asked_for(flags, expected):
    from apache_beam.options.pipeline_options import PipelineOptions

    from apache_beam.runners.dask.dask_runner import DaskRunner

    options = PipelineOptions(flags)
    assert runners.wants_dask(options) is expected
    assert isinstance(estimate.batch_runner(options), DaskRunner) is expected


def test_report_files_are_read_on_every_worker(reports, dask_cluster, tmp_path):
    """Reshuffle repartitions on Dask: the files do not all land in one worker's partition."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from ldpflow.transforms.io import ReadReports

    options = PipelineOptions(["--runner=DaskRunner", "--dask_npartitions=4",
                               f"--dask_client_address={dask_cluster.scheduler_address}"])
    out = str(tmp_path / "readers.json")
    with beam.Pipeline(runner=estimate.batch_runner(options), options=options) as p:
        _ = (p
             | ReadReports(f"{reports}/*/reports-*")
             | "Reader" >> beam.Map(lambda element: os.getpid())
             | "Distinct" >> beam.Distinct()
             | "Collect" >> beam.combiners.ToList()
             | "Write" >> beam.Map(lambda pids: pathlib.Path(out).write_text(json.dumps(pids))))
    readers = json.loads(pathlib.Path(out).read_text())
    assert len(readers) == 2 and os.getpid() not in readers


def test_every_leaf_runs_and_side_inputs_are_exact(dask_cluster, tmp_path):
    """Beam 2.77's DaskRunner computes only the last leaf and drops ``finish_bundle``
    outputs; ours computes every leaf and keeps them."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(["--runner=DaskRunner", "--dask_npartitions=3",
                               f"--dask_client_address={dask_cluster.scheduler_address}"])

    def write(name):
        return beam.Map(lambda value: (tmp_path / name).write_text(json.dumps(value)))

    class CountInBundleFn(beam.DoFn):  # emits only when its bundle finishes
        def start_bundle(self):
            self._count = 0

        def process(self, element):
            self._count += 1

        def finish_bundle(self):
            from apache_beam.transforms.window import GlobalWindow
            from apache_beam.utils.windowed_value import WindowedValue

            yield WindowedValue(self._count, GlobalWindow().max_timestamp(), (GlobalWindow(),))

    with beam.Pipeline(runner=estimate.batch_runner(options), options=options) as p:
        numbers = p | beam.Create(range(100))
        total = numbers | "Sum" >> beam.CombineGlobally(sum)
        _ = (numbers
             | "CountInBundles" >> beam.ParDo(CountInBundleFn())
             | "AddCounts" >> beam.CombineGlobally(sum)
             | "WriteCount" >> write("count.json"))
        _ = (numbers
             | "Share" >> beam.Map(lambda x, t: x / t, beam.pvalue.AsSingleton(total))
             | "Collect" >> beam.combiners.ToList()
             | "Sorted" >> beam.Map(sorted)
             | "WriteShares" >> write("shares.json"))
        _ = total | "WriteTotal" >> write("total.json")  # a second, independent leaf
    assert json.loads((tmp_path / "total.json").read_text()) == 4950
    assert json.loads((tmp_path / "count.json").read_text()) == 100
    assert json.loads((tmp_path / "shares.json").read_text()) == [x / 4950 for x in range(100)]


# -- ldpflow heavy-hitters ----------------------------------------------------------------

PEM_FLAGS = ["--bits", "32", "--k", "8", "--query_limit", "1024"]  # 5 stages


def without_timings(value):
    """The document without its wall-clock fields (``*_seconds``), which no two runs share."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not k.endswith("_seconds")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


@pytest.fixture(scope="module")
def pem_reports(tmp_path_factory):
    """PEM reports of two epsilons (two results), plus records the job must refuse."""
    root = tmp_path_factory.mktemp("pem")
    for epsilon, seed in ((4.0, 11), (2.0, 12)):
        simulate.run(["--oracle", "pem", *PEM_FLAGS, "--epsilon", str(epsilon),
                      "--domain_size", "300", "--users", "6000", "--seed", str(seed),
                      "--shards", "3", "--output", str(root / f"eps{seed}")])
    with open(sorted(root.glob("eps11/*.avro"))[0], "rb") as f:
        good = list(fastavro.reader(f))[:3]
    broken = [dict(good[0], oracle="nope"),
              dict(good[1], pem=dict(good[1]["pem"], top_k=9)),  # another configuration
              dict(good[2], pem=dict(good[2]["pem"], group=99))]
    (root / "broken").mkdir()
    with open(root / "broken" / "reports-broken.jsonl", "w", encoding="utf-8") as f:
        formats.write_json_lines(f, broken)
        f.write("{not json\n")
    return str(root)


def test_heavy_hitters_on_dask_equals_fnapi(pem_reports, dask_cluster, tmp_path):
    from ldpflow.pipelines import heavy_hitters

    flags = [f"--input={pem_reports}/*/reports-*", *PEM_FLAGS]
    expected = heavy_hitters.run([*flags, f"--output={tmp_path}/fnapi"])
    assert len(expected["results"]) == 2 and expected["dead_letters"]["total"] == 4
    assert expected["records"] == 2 * 6000 + 4 and len(expected["top_k"]) == 8
    before = executed_tasks(dask_cluster)
    document = heavy_hitters.run([
        *flags, f"--output={tmp_path}/dask", "--runner=DaskRunner",
        f"--dask_client_address={dask_cluster.scheduler_address}", "--dask_npartitions=4",
    ])
    after = executed_tasks(dask_cluster)
    # values, integer counts and every frequency, exactly
    assert without_timings(document) == without_timings(expected)
    assert dead_letters(f"{tmp_path}/dask") == dead_letters(f"{tmp_path}/fnapi")
    assert len(after) == 2 and all(after[w] > before.get(w, 0) for w in after), (before, after)
