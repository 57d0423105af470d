"""``ldpflow heavy-hitters`` on four engines: for every protocol, the same hostile files give
the same integer counts per pass, dead letters by reason, duplicates and bytes of
``heavy_hitters.json`` on Beam (FnApiRunner), the in-process plan, Dask (a LocalCluster of 2
worker processes) and Spark (2 executors).

The one field that differs by design is ``elapsed_seconds`` (set to None before the bytes
are compared). The run's id-hash key is fixed, so that a pass's ``batches`` (the (id-hash
bucket, group) parts counted) is the same from run to run.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import shutil

import fastavro
import numpy as np
import pytest

from ldpflow.pipelines import heavy_hitters, simulate
from ldpflow.plan import heavy_hitters as plan
from tests import wire_support as formats
from tests.plan.test_engines import dask_backend, spark_backend  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.pipeline, pytest.mark.slow]

#: Small configurations of every protocol (several passes each).
PROTOCOL_FLAGS = {
    "pem": ["--bits", "16", "--k", "8", "--query_limit", "256"],
    "spm": ["--bits", "16", "--k", "8"],
    "mcm": ["--bits", "16", "--k", "8"],
    "treehist": ["--bits", "16", "--k", "8", "--step_bits", "8"],
    "sfp": ["--bits", "16", "--k", "8", "--fragment_bits", "8", "--hash_bits", "4"],
}
USERS = 3000
#: What the hostile files hold besides the simulated reports.
BROKEN_AVRO, BROKEN_JSON, EXACT_COPIES, CONFLICTING_COPIES = 5, 2, 100, 3
ENGINES = ("local", "dask", "spark")


def write_inputs(folder, name: str) -> str:
    """Simulated reports of ``name`` in Avro, gzipped JSON lines and Parquet, with refused
    records of five reasons, a part of a file sent twice and copies that conflict."""
    simulate.run(["--oracle", name, *PROTOCOL_FLAGS[name], "--epsilon", "4", "--domain_size",
                  "200", "--users", str(USERS), "--seed", "5", "--output",
                  str(folder / "sim"), "--shards", "1"])
    records = []
    for path in sorted(glob.glob(f"{folder}/sim/*.avro")):
        with open(path, "rb") as f:
            records += list(fastavro.reader(f))
    half = len(records) // 2
    nested = records[11][name]
    broken = {7: dict(records[7], bucket=999), 8: dict(records[8], oracle="nope"),
              9: dict(records[9], epsilon=0.0), 10: dict(records[10], seed=None),
              11: dict(records[11], **{name: dict(nested, group=nested["group"] + 1)})}
    with open(folder / "a.avro", "wb") as f:
        formats.write_avro(f, [broken.get(i, r) for i, r in enumerate(records[:half])])
    lines = [json.dumps(formats.to_json_record(r)) for r in records[half:]]
    lines[3] = "{not json"
    lines[4] = json.dumps({"report_id": "x"})
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    copies = records[500:500 + EXACT_COPIES]
    conflicting = [dict(r, bucket=(r["bucket"] + 1) % r["hash_range"])
                   for r in records[20:20 + CONFLICTING_COPIES]]
    formats.write_parquet(str(folder / "c.parquet"), copies + conflicting)
    shutil.rmtree(folder / "sim")
    return str(folder / "*.*")


@pytest.fixture(scope="module", autouse=True)
def fixed_id_key():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("ldpflow.core.dedup.new_id_key", lambda: bytes(range(16)))
        yield


def _backend(request, engine):
    if engine == "local":
        from ldpflow.plan.backend import LocalBackend

        return LocalBackend()
    return None if engine == "beam" else request.getfixturevalue(f"{engine}_backend")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(protocol, engine) -> (summary, outputs); files per protocol; filled as tests run."""
    return {"folder": tmp_path_factory.mktemp("hh-engines")}


def _files(runs, name):
    if name not in runs:
        folder = runs["folder"] / f"in-{name}"
        folder.mkdir()
        runs[name] = write_inputs(folder, name)
    return runs[name]


def _outputs(folder):
    with open(f"{folder}/heavy_hitters.json", "rb") as f:
        raw = f.read()
    document = json.loads(raw)
    assert raw == json.dumps(document, indent=1).encode("utf-8")  # the bytes are this dump
    document["elapsed_seconds"] = None
    letters = {os.path.basename(p): open(p, "rb").read()
               for p in glob.glob(f"{folder}/dead_letters/*.jsonl")}
    return json.dumps(document, indent=1).encode("utf-8"), letters


def _run(request, runs, name, engine):
    key = (name, engine)
    if key not in runs:
        files = _files(runs, name)
        output = runs["folder"] / f"{name}-{engine}"
        argv = [f"--input={files}", f"--output={output}", f"--protocol={name}",
                f"--engine={engine}"]
        passes: list = []
        with pytest.MonkeyPatch.context() as patch:  # each pass's deduplicated sums
            corrected = plan.corrected_tallies
            patch.setattr(plan, "corrected_tallies",
                          lambda *a: passes.append(corrected(*a)) or passes[-1])
            summary = heavy_hitters.run(argv, backend=_backend(request, engine))
        runs[key] = summary, _outputs(output), passes
    return runs[key]


@pytest.mark.parametrize("name", sorted(PROTOCOL_FLAGS))
def test_beam_counts_what_the_files_hold(request, runs, name):
    summary, (document, letters), _ = _run(request, runs, name, "beam")
    doc = json.loads(document)
    total = USERS + EXACT_COPIES + CONFLICTING_COPIES
    broken = BROKEN_AVRO + BROKEN_JSON
    assert summary["records"] == doc["records"] == total
    assert summary["dead_letters"] == doc["dead_letters"]["total"] == broken
    assert sum(len(v.splitlines()) for v in letters.values()) == broken
    assert summary["duplicates"] == doc["duplicates"] == EXACT_COPIES + CONFLICTING_COPIES
    assert doc["n"] == USERS - broken and sum(doc["group_sizes"]) == doc["n"]
    assert doc["passes"] and doc["passes"][0]["candidates"] > 0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(PROTOCOL_FLAGS))
def test_engine_gives_beams_counts_and_bytes(request, runs, name, engine):
    beam_summary, (beam_document, beam_letters), _ = _run(request, runs, name, "beam")
    summary, (document, letters), _ = _run(request, runs, name, engine)
    for field in ("records", "reports", "estimated", "duplicates", "dead_letters",
                  "candidates", "survivors", "reasons", "lost_parts"):
        assert summary[field] == beam_summary[field], field
    assert json.loads(document)["dead_letters"] == json.loads(beam_document)["dead_letters"]
    assert document == beam_document  # byte-identical but for elapsed_seconds
    assert letters == beam_letters and len(letters) == 2  # a.avro and b.jsonl.gz


@pytest.mark.parametrize("name", sorted(PROTOCOL_FLAGS))
def test_plan_engines_count_identical_integers_per_pass(request, runs, name):
    """The sums every pass's candidates are chosen from (after the copies are taken out),
    per configuration, equal between the plan's engines to the last integer."""
    local = _run(request, runs, name, "local")[2]
    assert len(local) > 1 and all(local)
    for engine in ("dask", "spark"):
        other = _run(request, runs, name, engine)[2]
        assert len(other) == len(local)
        for mine, theirs in zip(local, other, strict=True):
            assert mine.keys() == theirs.keys()
            for key, tally in mine.items():
                assert theirs[key].counts == tally.counts  # every sum, exactly
                assert np.array_equal(theirs[key].group_counts, tally.group_counts)
                assert np.array_equal(theirs[key].parts, tally.parts)
                assert tally.counts is not None  # every pass had candidates here
                assert all(a.dtype.kind == "i" for a in tally.counts.arrays.values())
