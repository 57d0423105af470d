"""``deploy/`` cannot drift from the code: templates, flag files, schedules and Dockerfiles.

Nothing here builds an image or calls a cloud API; the checks tie every parameter, flag and
path in ``deploy/`` to the jobs' flags (``ldpflow.pipelines.options.JOBS``, parsed as the
CLI parses them) and to the repository's files.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest
import yaml

from ldpflow.pipelines import common
from ldpflow.pipelines.options import JOBS, parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
FLAG_FILES = sorted(DEPLOY.glob("*/*.flags"))
#: Plausible values of the flag files' variables, to parse their flags with.
VARIABLES = {"PROJECT": "my-project", "REGION": "europe-west1", "BUCKET": "my-bucket",
             "WORKER_IMAGE": "registry.example.com/ldpflow/worker:0.1.0",
             "LDPFLOW_SETUP_FILE": str(ROOT / "setup.py"), "FLINK_MASTER": "flink:8081",
             "FLINK_VERSION": "1.20", "PARALLELISM": "8",
             "SPARK_MASTER_URL": "spark://spark-master:7077", "DIRECT_NUM_WORKERS": "2"}
#: Values of each job's required flags, to parse a flag file's flags as that job's.
REQUIRED_VALUES = {"input": "gs://b/reports/*.avro", "output": "gs://b/out", "k": "8",
                   "bits": "32", "subscription": "projects/p/subscriptions/s"}


def job_flags(job: str) -> dict[str, argparse.Action]:
    """The flags of ``ldpflow JOB`` (what its ``--help`` lists), by name without the dashes;
    ``action.required`` marks the job's required ones."""
    parser = common.job_help(JOBS[job])
    return {a.option_strings[0][2:]: a for a in parser._actions
            if a.option_strings and a.dest != "help"}


def job_accepts(job: str, argv: list[str]) -> argparse.Namespace:
    """The job's own flags of ``argv``, parsed as ``ldpflow JOB`` parses them: a flag that is
    neither Beam's nor the job's, a bad value or a missing required flag fails the test."""
    try:
        _, args = common.job_options(job, argv)
    except SystemExit as exc:
        pytest.fail(f"ldpflow {job} refuses {argv}: {exc.code}")
    return args


def check_command(argv: list[str], job: str = "heavy-hitters") -> dict[str, str]:
    """``argv`` is ``ldpflow JOB --flag=value ...`` that the job accepts; returns the flags."""
    assert argv[:2] == ["ldpflow", job]
    given = {}
    for token in argv[2:]:
        assert token.startswith("--") and "=" in token, token
        name, value = token[2:].split("=", 1)
        given[name] = value
    args = job_accepts(job, argv[2:])
    for name in given.keys() & job_flags(job).keys():  # every job flag's value parses
        assert getattr(args, job_flags(job)[name].dest) is not None, name
    return given


# -- Flex Template metadata ---------------------------------------------------------------


@pytest.mark.parametrize("job", sorted(JOBS))
def test_template_parameters_are_exactly_the_job_flags(job):
    metadata = json.loads((DEPLOY / "dataflow/flex" / f"{job}-metadata.json").read_text())
    assert metadata["name"] == f"ldpflow {job}" and metadata["description"]
    params = {p["name"]: p for p in metadata["parameters"]}
    assert len(params) == len(metadata["parameters"])
    flags = job_flags(job)
    assert set(params) == set(flags)
    for name, param in params.items():
        action = flags[name]
        assert param["label"] and param["helpText"]
        assert param["isOptional"] is (not action.required), name
        if "regexes" not in param:
            continue
        regex = re.compile(param["regexes"][0])
        accepts = (lambda s, r=regex: r.fullmatch(s) is not None)  # noqa: E731
        if action.default is not None:
            assert accepts(str(action.default)), (name, action.default)
        for choice in action.choices or ():
            assert accepts(choice), (name, choice)
        if action.choices:
            assert not accepts("bogus"), name
        if action.type is int:
            assert accepts("12") and not accepts("1.5") and not accepts("-3"), name
        if action.type is float:
            assert all(map(accepts, ("2", "0.5", "1e-3", ".25"))), name
            assert not accepts("x") and not accepts("-1"), name


def test_template_method_regex_knows_every_method():
    from ldpflow.core.postprocess import METHODS

    metadata = json.loads((DEPLOY / "dataflow/flex/estimate-metadata.json").read_text())
    (regex,) = next(p for p in metadata["parameters"] if p["name"] == "methods")["regexes"]
    assert re.fullmatch(regex, ",".join(METHODS))
    assert not re.fullmatch(regex, "base,bogus")


# -- Dockerfiles --------------------------------------------------------------------------


def dockerfile(path: pathlib.Path) -> list[tuple[str, str]]:
    text = path.read_text().replace("\\\n", " ")
    return [tuple(line.split(None, 1)) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("path", ["deploy/docker/Dockerfile", "deploy/dataflow/flex/Dockerfile"])
def test_dockerfiles_copy_existing_paths_the_dockerignore_lets_through(path):
    instructions = dockerfile(ROOT / path)
    ignore = (ROOT / f"{path}.dockerignore").read_text().splitlines()
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copies = [args.split() for op, args in instructions if op == "COPY"]
    assert copies
    for *sources, _destination in copies:
        for source in sources:
            assert (ROOT / source).exists(), source
            assert source.rstrip("/") in allowed, f"{source} is not in the .dockerignore"


@pytest.mark.parametrize("path", ["deploy/docker/Dockerfile", "deploy/dataflow/flex/Dockerfile"])
def test_dockerfiles_copy_every_file_the_package_build_reads(path):
    """setup.py reads README.md (long_description) and ships its license_files."""
    setup = (ROOT / "setup.py").read_text()
    licenses = re.search(r"license_files=\[([^\]]*)\]", setup)
    needed = {"setup.py", "pyproject.toml", "README.md", "ldpflow"}
    needed |= set(re.findall(r'"([^"]+)"', licenses.group(1))) if licenses else set()
    copied = {source.rstrip("/") for op, args in dockerfile(ROOT / path) if op == "COPY"
              for source in args.split()[:-1]}
    assert needed <= copied, needed - copied


def test_docker_images_pin_the_same_python_and_beam():
    worker = dict(dockerfile(DEPLOY / "docker/Dockerfile"))
    launcher_lines = dockerfile(DEPLOY / "dataflow/flex/Dockerfile")
    args = {a.split("=")[0]: a.split("=", 1)[1] for op, a in launcher_lines if op == "ARG"
            and "=" in a}
    assert worker["FROM"] == "apache/beam_python3.11_sdk:${BEAM_VERSION}"
    (beam_arg,) = [a for op, a in dockerfile(DEPLOY / "docker/Dockerfile")
                   if op == "ARG" and a.startswith("BEAM_VERSION=")]
    assert beam_arg.split("=")[1] == args["BEAM_VERSION"]
    launcher = dict(launcher_lines)
    assert launcher["FROM"] == "gcr.io/dataflow-templates-base/python311-template-launcher-base"


def test_flex_launcher_points_at_its_entry_point_and_setup_file():
    lines = dockerfile(DEPLOY / "dataflow/flex/Dockerfile")
    env = {a.split("=")[0]: a.split("=", 1)[1] for op, a in lines if op == "ENV"}
    copies = {args.split()[-1].rstrip("/"): args.split()[:-1] for op, args in lines
              if op == "COPY"}
    assert env["FLEX_TEMPLATE_PYTHON_PY_FILE"] == "/template/main.py"
    assert copies["./main.py"] == ["deploy/dataflow/flex/main.py"]
    assert env["FLEX_TEMPLATE_PYTHON_SETUP_FILE"] == "${SETUP_FILE}"
    assert "ARG SETUP_FILE=/template/setup.py" in (DEPLOY / "dataflow/flex/Dockerfile").read_text()
    assert ("WORKDIR", "/template") in lines
    assert copies["."] == ["setup.py", "pyproject.toml", "README.md", "LICENSE"]


@pytest.mark.parametrize("job", sorted(JOBS))
def test_flex_entry_point_runs_the_job(job, monkeypatch):
    from ldpflow.pipelines import cli

    seen = []
    monkeypatch.setitem(cli.COMMANDS, job, lambda argv: seen.append(argv) or 0)
    monkeypatch.setenv("LDPFLOW_JOB", job)
    monkeypatch.setattr(sys, "argv", ["main.py", "--input=gs://b/x", "--output=gs://b/y"])
    source = (DEPLOY / "dataflow/flex/main.py").read_text()
    with pytest.raises(SystemExit) as exit_:
        exec(compile(source, "main.py", "exec"), {"__name__": "__main__"})
    assert exit_.value.code == 0 and seen == [["--input=gs://b/x", "--output=gs://b/y"]]


# -- Runner flag files and deploy/launch.sh -----------------------------------------------


def flag_file_jobs(path: pathlib.Path) -> list[str]:
    """The jobs a flag file is for: ``streaming.flags`` the streaming job, the others the
    batch jobs."""
    return ["stream"] if path.name == "streaming.flags" else ["estimate", "heavy-hitters"]


@pytest.mark.parametrize("path", FLAG_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_flag_files_name_flags_their_jobs_accept_and_document_their_variables(path):
    lines = [line.strip() for line in path.read_text().splitlines()]
    flags = [line for line in lines if line and not line.startswith("#")]
    comments = " ".join(line for line in lines if line.startswith("#"))
    for flag in flags:
        assert flag.startswith("--"), flag
    variables = set(re.findall(r"\$\{(\w+)\}", "\n".join(flags)))
    needs = re.search(r"Needs: (.*?)\.(\s|$)", comments)
    assert needs, f"{path.name} does not say which variables it needs"
    documented = set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", needs.group(1)))
    assert variables - {"LDPFLOW_SETUP_FILE"} == documented, path.name  # launch.sh sets it
    expanded = [re.sub(r"\$\{(\w+)\}", lambda m: VARIABLES[m.group(1)], f) for f in flags]
    for job in flag_file_jobs(path):
        required = [f"--{name}={REQUIRED_VALUES[name]}" for name in JOBS[job].required]
        job_accepts(job, [*expanded, *required])
        if job != "stream":  # the flags alone make the default --engine auto run Beam
            local = [f"--{name}=/data/{name}" for name in JOBS[job].required]
            assert parse(job, [*expanded, *local]).args.engine == "beam", path.name


@pytest.mark.parametrize("job", ["estimate", "heavy-hitters"])
def test_a_flex_template_launch_runs_the_beam_job(job):
    """The launcher passes Beam's options (project, region, job name, staging) with the
    template's parameters: --engine auto, the default, then runs the Beam job."""
    launched = ["--project=p", "--region=europe-west1", "--job_name=ldpflow-job",
                "--temp_location=gs://b/tmp", "--staging_location=gs://b/staging",
                "--input=/mnt/reports/*.avro", "--output=/mnt/out"]
    parsed = parse(job, launched)
    assert parsed.args.engine == "beam"
    assert parsed.engine_reason.startswith("--engine auto: --project, --region, --job_name")


def launch(flag_file: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(DEPLOY / "launch.sh"), str(DEPLOY / flag_file), "estimate", *args],
        env={"PATH": os.environ["PATH"], "LDPFLOW": "printf %s\\n", **env},
        capture_output=True, text=True, timeout=30)


def test_launch_expands_the_flag_file_then_appends_the_job_flags():
    proc = launch("dataflow/batch.flags", {"PROJECT": "p", "REGION": "europe-west1",
                                           "BUCKET": "b $x ${Y}"}, "--input=gs://b/*.avro")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "estimate", "--runner=DataflowRunner", "--project=p", "--region=europe-west1",
        "--temp_location=gs://b $x ${Y}/tmp", "--staging_location=gs://b $x ${Y}/staging",
        f"--setup_file={ROOT}/setup.py", "--input=gs://b/*.avro"]


def test_launch_refuses_a_missing_variable():
    proc = launch("dataflow/batch.flags", {"PROJECT": "p", "BUCKET": "b"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert "needs the environment variable REGION" in proc.stderr


# -- The scheduled heavy-hitter discovery -------------------------------------------------


def airflow_command() -> list[str]:
    """The DAG's COMMAND, evaluated from its module-level string constants (no Airflow)."""
    tree = ast.parse((DEPLOY / "airflow/ldpflow_heavy_hitters_daily.py").read_text())
    constants = ast.Module(body=[node for node in tree.body if isinstance(node, ast.Assign)],
                           type_ignores=[])
    namespace: dict = {}
    exec(compile(constants, "dag", "exec"), namespace)
    return namespace["COMMAND"], namespace["DAY"]


def test_airflow_dag_runs_heavy_hitters_on_the_previous_day():
    command, day = airflow_command()
    assert day == "{{ data_interval_start | ds }}"
    source = (DEPLOY / "airflow/ldpflow_heavy_hitters_daily.py").read_text()
    assert 'CronDataIntervalTimetable("30 2 * * *", timezone="UTC")' in source
    example = json.loads((DEPLOY / "airflow/variables.example.json").read_text())
    config = {k: str(v) for k, v in example["ldpflow_heavy_hitters"].items()}

    def render(token: str) -> str:  # what Airflow's Jinja makes of each token
        token = token.replace(day, "2026-11-29")
        return re.sub(r"\{\{ var\.json\.ldpflow_heavy_hitters\.(\w+) \}\}",
                      lambda m: config[m.group(1)], token)

    argv = shlex.split(" ".join(render(t) for t in command))
    given = check_command(argv)
    assert given["input"] == f"{config['reports']}/dt=2026-11-29/*.avro"
    assert given["output"] == f"{config['output']}/dt=2026-11-29"
    assert given["runner"] == "DataflowRunner"


def cronjob() -> tuple[dict, dict]:
    config_map, cron = yaml.safe_load_all((DEPLOY / "kubernetes/heavy-hitters-cronjob.yaml")
                                          .read_text())
    assert (config_map["kind"], cron["kind"]) == ("ConfigMap", "CronJob")
    return config_map, cron


@pytest.mark.parametrize("override", [None, "2026-11-20"])
def test_kubernetes_cronjob_runs_heavy_hitters_on_the_previous_day(tmp_path, override):
    config_map, cron = cronjob()
    assert (cron["spec"]["schedule"], cron["spec"]["timeZone"]) == ("30 2 * * *", "Etc/UTC")
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["envFrom"] == [{"configMapRef": {"name": config_map["metadata"]["name"]}}]
    fake = tmp_path / "ldpflow"  # prints the command line it is given, one token a line
    fake.write_text("#!/usr/bin/env bash\nprintf '%s\\n' ldpflow \"$@\"\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", **config_map["data"]}
    if override:
        env["LDPFLOW_DATE"] = override
    before = datetime.datetime.now(datetime.timezone.utc)
    proc = subprocess.run([*container["command"], container["args"][0]], env=env,
                          capture_output=True, text=True, timeout=30, check=True)
    after = datetime.datetime.now(datetime.timezone.utc)
    days = {(t - datetime.timedelta(days=1)).date().isoformat() for t in (before, after)}
    head, *argv = proc.stdout.splitlines()
    day = head.removeprefix("heavy hitters of ")
    assert day == override if override else day in days
    given = check_command(argv)
    assert given["input"] == f"{config_map['data']['REPORTS']}/dt={day}/*.avro"
    assert given["output"] == f"{config_map['data']['OUTPUT']}/dt={day}"
    # By default the pod runs the job itself: one CPU per SDK worker process.
    assert given["runner"] == "FnApiRunner"
    assert given["direct_running_mode"] == "multi_processing"
    cpu = container["resources"]["requests"]["cpu"]
    assert int(given["direct_num_workers"]) == int(cpu) > 1, (given, cpu)


def test_cloud_workflow_launches_the_heavy_hitters_template_with_its_parameters():
    workflow = yaml.safe_load((DEPLOY / "scheduler/heavy-hitters-workflow.yaml").read_text())
    steps = {name: step for item in workflow["main"]["steps"] for name, step in item.items()}
    launch_step = steps["launch"]
    assert launch_step["call"] == "googleapis.dataflow.v1b3.projects.locations.flexTemplates.launch"
    assert "sys.now() - 86400" in json.dumps(steps["init"])
    values = {"REGION": "europe-west1", "BUCKET": "b", "VERSION": "0.1.0", "HH_K": "32",
              "HH_BITS": "64", "HH_EPSILON": "4.0", "HH_CODEC": "int"}
    text = (DEPLOY / "scheduler/heavy-hitters-args.json").read_text()
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(values)
    args = json.loads(re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], text))
    # The workflow passes args.parameters plus input and output (with {date} replaced).
    sent = {**args["parameters"], "input": args["input"], "output": args["output"]}
    metadata = json.loads((DEPLOY / "dataflow/flex/heavy-hitters-metadata.json").read_text())
    params = {p["name"]: p for p in metadata["parameters"]}
    assert set(sent) <= set(params)
    assert {n for n, p in params.items() if not p["isOptional"]} <= set(sent)
    for name, value in sent.items():
        value = value.replace("{date}", "2026-11-29")
        assert all(re.fullmatch(r, value) for r in params[name].get("regexes", [])), name
    assert args["template"].endswith("ldpflow-heavy-hitters-0.1.0.json")
    create = (DEPLOY / "scheduler/create.sh").read_text()
    assert "heavy-hitters-workflow.yaml" in create and "heavy-hitters-args.json" in create
