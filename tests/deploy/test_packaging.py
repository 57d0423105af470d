"""The built package works on its own: wheel into a clean virtualenv, ``--setup_file`` staging.

Both tests build from a copy of the source tree (setuptools writes ``build/`` and
``*.egg-info`` next to ``setup.py``). The wheel is built the way a user builds it
(``pip wheel --no-deps .``, with build isolation: it fetches ``setuptools`` and ``wheel``
from the package index, as ``./dev`` does). The clean virtualenv has no pip and no
packages; a ``.pth`` file lets it import the dependencies (numpy, Beam, ...) from the
running environment, and the package itself comes from the wheel only.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile

import pytest

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCHEMAS = {"estimate.avsc", "report.avsc"}


def copy_source(dst: pathlib.Path) -> pathlib.Path:
    """The files a build reads (setup.py, pyproject.toml, README.md, LICENSE, ldpflow/) under
    ``dst``: those the Dockerfiles copy."""
    dst.mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, dst / name)
    shutil.copytree(ROOT / "ldpflow", dst / "ldpflow",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return dst


def clean_venv(path: pathlib.Path) -> pathlib.Path:
    """A virtualenv without pip whose only extra import path is this environment's packages."""
    venv.create(path, with_pip=False, clear=True)
    python = path / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = subprocess.run([python, "-c", code], check=True, capture_output=True,
                             text=True).stdout.strip()
    # Lines of a .pth are appended to sys.path; the dependency environment's own .pth files
    # (among them ./dev's editable ldpflow) are not processed, so ldpflow comes from the wheel.
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    pathlib.Path(purelib, "_ldpflow_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return python


def _clean_env() -> dict:
    """This environment without ``PYTHONPATH``/``PYTHONHOME``: a checkout on the path (with
    its ``ldpflow.egg-info``) would make pip see ldpflow installed in the clean virtualenv,
    and install nothing there."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def pip_install(python: pathlib.Path, target: pathlib.Path | str, cwd: pathlib.Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", str(target)], check=True, cwd=cwd, env=_clean_env())


def run(args: list, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=_clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc


INSTALLED = """
import importlib.resources, json, ldpflow, ldpflow.schemas
files = importlib.resources.files("ldpflow.schemas").iterdir()
fields = ldpflow.schemas.load_schema("report")["fields"]
print(json.dumps({"file": ldpflow.__file__, "schemas": sorted(p.name for p in files),
                  "report_fields": [f["name"] for f in fields]}))
"""


def installed(python: pathlib.Path, cwd: pathlib.Path) -> dict:
    return json.loads(run([python, "-c", INSTALLED], cwd).stdout)


def test_wheel_installs_into_a_clean_venv_and_the_cli_runs(tmp_path):
    source = copy_source(tmp_path / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--wheel-dir", str(tmp_path / "dist"), str(source)], check=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("ldpflow-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"ldpflow/schemas/{s}" for s in SCHEMAS} | {"ldpflow/py.typed"} <= set(names)
    assert not any(n.startswith(("tests/", "deploy/", "benchmarks/")) for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "ldpflow = ldpflow.pipelines.cli:main" in zipfile.ZipFile(wheel).read(
        entry_points).decode()

    work = tmp_path / "work"  # not the source tree: nothing may be imported from there
    work.mkdir()
    python = clean_venv(tmp_path / "venv")
    pip_install(python, wheel, work)
    found = installed(python, work)
    assert pathlib.Path(found["file"]).is_relative_to(tmp_path / "venv")
    assert SCHEMAS <= set(found["schemas"]) and "oracle" in found["report_fields"]

    ldpflow = tmp_path / "venv" / "bin" / "ldpflow"
    assert "heavy-hitters" in run([ldpflow, "--help"], work).stdout
    run([ldpflow, "simulate", "--oracle", "grr", "--epsilon", "1.0", "--domain_size", "16",
         "--users", "300", "--seed", "3", "--shards", "2", "--output", "reports"], work)
    run([ldpflow, "estimate", "--input=reports/reports-*.avro", "--output=estimates",
         "--methods=base,norm-sub"], work)
    document = json.loads((work / "estimates" / "estimates.json").read_text())
    (result,) = document["results"]
    assert (result["oracle"], result["n"], document["dead_letters"]["total"]) == ("grr", 300, 0)


def test_setup_file_stages_an_installable_package(tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.stager import Stager

    source = copy_source(tmp_path / "src")
    staging = tmp_path / "staging"
    staging.mkdir()
    options = PipelineOptions([f"--setup_file={source}/setup.py"])
    resources = Stager.create_job_resources(options, str(staging),
                                            log_submission_env_dependencies=False)
    staged = {name: path for path, name, _ in Stager.extract_staging_tuple_iter(resources)}
    # Workers' boot installs this file with pip before running any bundle.
    tarball = pathlib.Path(staged["workflow.tar.gz"])
    with tarfile.open(tarball) as tar:
        members = {pathlib.PurePosixPath(n).relative_to("ldpflow-0.1.0").as_posix()
                   for n in tar.getnames() if n != "ldpflow-0.1.0"}
    assert {"setup.py", "pyproject.toml", "ldpflow/pipelines/cli.py"} <= members
    assert {f"ldpflow/schemas/{s}" for s in SCHEMAS} <= members

    work = tmp_path / "worker"
    work.mkdir()
    shutil.copy(tarball, work / "workflow.tar.gz")
    python = clean_venv(tmp_path / "venv")
    pip_install(python, "workflow.tar.gz", work)
    found = installed(python, work)
    assert pathlib.Path(found["file"]).is_relative_to(tmp_path / "venv")
    assert SCHEMAS <= set(found["schemas"])
