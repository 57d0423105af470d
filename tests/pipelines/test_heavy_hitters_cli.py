"""``ldpflow heavy-hitters`` from the command line: the plan's engines run without Beam
installed, and ``--quiet`` silences the progress lines."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from ldpflow.pipelines import heavy_hitters, simulate
from ldpflow.plan import progress as progress_module

FLAGS = ["--bits", "16", "--k", "4", "--query_limit", "256"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hh-cli")
    simulate.run(["--oracle", "pem", *FLAGS, "--epsilon", "4", "--domain_size", "50",
                  "--users", "1000", "--seed", "3", "--output", str(folder / "r"),
                  "--shards", "2"])
    return folder / "r"


def test_heavy_hitters_on_the_local_engine_runs_without_beam(reports, tmp_path):
    # apache_beam set to None in sys.modules: any import of it raises ImportError.
    code = ("import sys; sys.modules['apache_beam'] = None\n"
            "from ldpflow.pipelines.cli import main\nsys.exit(main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", code, "heavy-hitters",
                           f"--input={reports}/*.avro", f"--output={tmp_path}/hh",
                           "--engine=local", f"--truth={reports}/truth.json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "hh" / "heavy_hitters.json").read_text())
    assert document["n"] == document["records"] == 1000 and document["error"] is None
    assert "scores" in document  # --truth read through the plan's files, too
    # The same command finds no input without Beam as with it: one line, exit 2.
    done = subprocess.run([sys.executable, "-c", code, "heavy-hitters",
                           f"--input={tmp_path}/none/*.avro", f"--output={tmp_path}/o",
                           "--engine=local"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("matched no files"), done.stderr


def test_importing_the_job_does_not_import_beam():
    code = ("import sys\nimport ldpflow.pipelines.heavy_hitters\n"
            "sys.exit('apache_beam' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("engine", [pytest.param("beam", marks=pytest.mark.pipeline), "local"])
@pytest.mark.parametrize("quiet", [False, True])
def test_heavy_hitters_logs_its_progress_unless_quiet(reports, tmp_path, caplog, quiet,
                                                      engine):
    argv = [f"--input={reports}/*.avro", f"--output={tmp_path}/hh", f"--engine={engine}"]
    with caplog.at_level(logging.INFO, logger="ldpflow.progress"):
        try:
            heavy_hitters.run(argv + (["--quiet"] if quiet else []))
        finally:
            progress_module.set_quiet(False)
    lines = [r.getMessage() for r in caplog.records if r.name == "ldpflow.progress"]
    if quiet:
        assert lines == []
    else:
        assert lines[-1].startswith("progress (job): 1,000 records read")
        assert lines[-1].endswith(", done")


def test_quiet_is_a_flag_of_the_command_with_estimates_help():
    from ldpflow.pipelines.options import COMMANDS

    mine, theirs = (COMMANDS[name].flags()["quiet"] for name in ("heavy-hitters", "estimate"))
    assert mine == theirs  # the one flag, shared


@pytest.mark.parametrize("engine", ["local", pytest.param("beam", marks=pytest.mark.pipeline)])
def test_heavy_hitters_takes_estimates_limits_and_fails_when_they_refuse_everything(
        reports, tmp_path, engine, capsys):
    """estimate's --max_* limits bound heavy-hitter reports too: reports over them are
    dead letters naming the flag, and a run that refused every record exits 1."""
    from ldpflow.pipelines.cli import main

    argv = ["heavy-hitters", f"--input={reports}/*.avro", f"--output={tmp_path}/hh",
            f"--engine={engine}", "--quiet"]
    assert main([*argv, "--max_epsilon", "3"]) == 1  # the reports are made with epsilon 4
    document = json.loads((tmp_path / "hh" / "heavy_hitters.json").read_text())
    assert document["n"] == 0 and document["error"] == "no valid reports"
    (reason, count), = document["dead_letters"]["by_reason"].items()
    assert count == 1000 and "--max_epsilon" in reason
    assert main([*argv, "--max_epsilon", "4"]) == 0  # at the limit: accepted
    capsys.readouterr()
    assert main([*argv, "--max_keys", "0"]) == 2  # a usage error, one line
    assert capsys.readouterr().err.strip().endswith("--max_keys must be a positive integer, "
                                                    "got 0")


def test_pass_store_reread_finds_what_the_spill_finds_and_is_the_plans_alone(
        reports, tmp_path, capsys):
    from ldpflow.pipelines.cli import main

    documents = []
    for store in ("disk", "reread"):
        out = tmp_path / store
        assert main(["heavy-hitters", f"--input={reports}/*.avro", f"--output={out}",
                     "--engine=local", "--quiet", f"--pass_store={store}"]) == 0
        document = json.loads((out / "heavy_hitters.json").read_text())
        document.pop("elapsed_seconds", None)
        documents.append(document)
        assert not [p for p in out.iterdir() if p.name.startswith(".ldpflow-passes-")]
    assert documents[0] == documents[1]
    capsys.readouterr()
    assert main(["heavy-hitters", "--engine=beam", f"--input={reports}/*.avro",
                 f"--output={tmp_path}/b", "--pass_store=reread"]) == 2
    assert "--pass_store is the job plan's" in capsys.readouterr().err
