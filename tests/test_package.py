"""Package-wide rules: the import boundary, __all__, metadata in one place."""

from __future__ import annotations

import importlib
import pathlib
import pkgutil
import subprocess
import sys

import pytest

import ldpflow

ROOT = pathlib.Path(__file__).resolve().parents[1]


def all_modules():
    names = ["ldpflow"]
    for info in pkgutil.walk_packages(ldpflow.__path__, "ldpflow."):
        names.append(info.name)
    return names


def test_core_and_top_level_do_not_import_beam():
    code = ("import sys, ldpflow, ldpflow.core, ldpflow.core.oracles; "
            + "".join(f"import {m}; " for m in all_modules() if m.startswith("ldpflow.core"))
            + "sys.exit('apache_beam' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_wire_layer_does_not_import_beam():
    code = ("import sys; "
            + "".join(f"import {m}; " for m in all_modules() if m.startswith("ldpflow.wire"))
            + "sys.exit('apache_beam' in sys.modules)")
    assert "ldpflow.wire.parse" in code
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_job_plan_and_its_engines_do_not_import_beam():
    """ldpflow.plan (the steps, the backend, the job) and ldpflow.engines (its Dask and
    Spark adapters) run where Apache Beam is not installed."""
    names = [m for m in all_modules() if m.startswith(("ldpflow.plan", "ldpflow.engines"))]
    assert {"ldpflow.plan.steps", "ldpflow.plan.job", "ldpflow.engines.dask_backend",
            "ldpflow.engines.spark_backend"} <= set(names)
    code = ("import sys; " + "".join(f"import {m}; " for m in names)
            + "from ldpflow.plan.backend import LocalBackend; "
            + "sys.exit('apache_beam' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def test_core_imports_only_numpy_scipy_and_itself():
    allowed = {"numpy", "scipy", "ldpflow", "__future__"}
    stdlib = set(sys.stdlib_module_names)
    for path in (ROOT / "ldpflow" / "core").rglob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("import", "from") and not line.startswith(" "):
                top = words[1].split(".")[0]
                assert top in allowed or top in stdlib, f"{path.name}: {line}"


@pytest.mark.parametrize("name", all_modules())
def test_every_public_module_lists_existing_names(name):
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    for attr in module.__all__:
        assert hasattr(module, attr), f"{name}.__all__ names missing {attr}"


def test_version_lives_in_setup_py_only():
    setup = (ROOT / "setup.py").read_text()
    assert f'version="{ldpflow.__version__}"' in setup
    assert "[project]" not in (ROOT / "pyproject.toml").read_text()


def test_core_type_checks():
    """mypy on the pure core (the house style: complete type hints in core)."""
    api = pytest.importorskip("mypy.api", reason="mypy is in the test extra")
    out, err, status = api.run([str(ROOT / "ldpflow" / "core"),
                                "--config-file", str(ROOT / "pyproject.toml"),
                                "--cache-dir", "/tmp/ldpflow-mypy-cache"])
    assert status == 0, out + err


def test_every_pinned_beam_version_is_in_the_one_declared_range():
    """setup.py declares the apache-beam range once; the images pin a version inside it."""
    import re

    from packaging.specifiers import SpecifierSet

    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    (declared,) = re.findall(r'"apache-beam(?:\[\w+\])?([^"]+)"', setup)
    pins = [match for path in ROOT.glob("deploy/**/Dockerfile")
            for match in re.findall(r"BEAM_VERSION=([\d.]+)", path.read_text(encoding="utf-8"))]
    assert pins, "no Dockerfile pins BEAM_VERSION"
    assert all(pin in SpecifierSet(declared) for pin in pins), (declared, pins)
    apache_beam = pytest.importorskip("apache_beam")
    assert apache_beam.__version__ in SpecifierSet(declared)
