"""``./dev``: its usage, and that each command installs the extras it needs and no more
(checked against a stand-in virtualenv that records what it is asked to install)."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _dev(folder: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(folder / "dev"), *args], capture_output=True, text=True,
                          cwd=folder, env={**os.environ, "PYTHON": "false"})


def test_usage_lists_the_commands_and_nothing_of_the_script():
    for args, code, stream in (((), 2, "stderr"), (("help",), 0, "stdout"),
                               (("bogus",), 2, "stderr")):
        done = _dev(ROOT, *args)
        text = getattr(done, stream)
        assert done.returncode == code, (args, done)
        assert "./dev demo" in text and "./dev test" in text
        assert "set -euo" not in text and "#" not in text


def _stand_in(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A copy of ./dev beside a virtualenv whose python, ldpflow and ruff only log."""
    shutil.copy(ROOT / "dev", tmp_path / "dev")
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("python", "ldpflow", "ruff"):
        script = bin_dir / tool
        script.write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> "{log}"\n')
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return tmp_path, log


def _installs(log: pathlib.Path) -> list[str]:
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [line.split()[-1] for line in calls if "install --quiet -e" in line]


def test_demo_installs_only_what_it_needs_and_test_adds_the_rest(tmp_path):
    folder, log = _stand_in(tmp_path)
    assert _dev(folder, "demo").returncode == 0
    assert _installs(log) == [".[beam,plot]"]
    assert _dev(folder, "demo").returncode == 0
    assert _installs(log) == []  # installed from these sources already
    assert _dev(folder, "test", "-q").returncode == 0
    assert _installs(log) == [".[beam,dask,gcp,plot,spark,test]"]
    assert _dev(folder, "demo").returncode == 0
    assert _installs(log) == []  # a superset is installed
    (folder / "setup.py").write_text((folder / "setup.py").read_text() + "\n# changed\n")
    assert _dev(folder, "demo").returncode == 0
    assert _installs(log) == [".[beam,plot]"]  # new sources: what this command needs
