"""Repository-wide documentation rules: the specification lives in ``docs/spec/``.

Nothing in the repository may point to a specification outside it, and every page the index
``docs/spec/README.md`` links to must exist.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC = ROOT / "docs" / "spec"
# Spelled in pieces so that this file does not match itself.
FORBIDDEN = ("../" + "shared", "shared" + "/spec")
SKIPPED = {"LICENSE"}
_LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def repository_files() -> list[str]:
    """Tracked files plus untracked ones that are not ignored (new files count too)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode("utf-8")
    return sorted({name for name in out.split("\0") if name})


def text_of(path: pathlib.Path) -> str | None:
    """The file's text, or None for a binary (NUL bytes or not UTF-8) or vanished file."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def test_no_file_points_outside_the_repository_for_the_spec():
    offenders = []
    for name in repository_files():
        if pathlib.PurePosixPath(name).name in SKIPPED:
            continue
        text = text_of(ROOT / name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if any(pattern in line for pattern in FORBIDDEN):
                offenders.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not offenders, "references to a specification outside the repository:\n" + "\n".join(
        offenders)


def test_spec_index_links_exist():
    index = (SPEC / "README.md").read_text(encoding="utf-8")
    linked = set(_LINK.findall(index))
    assert {"oracles.md", "consistency.md", "heavy_hitters.md"} <= linked
    missing = sorted(link for link in linked if not (SPEC / link).resolve().is_file())
    assert not missing, f"docs/spec/README.md links to missing pages: {missing}"


def test_every_spec_page_is_in_the_index():
    index = (SPEC / "README.md").read_text(encoding="utf-8")
    linked = {(SPEC / link).resolve() for link in _LINK.findall(index)}
    pages = {page.resolve() for page in SPEC.glob("*.md") if page.name != "README.md"}
    assert pages <= linked, f"spec pages missing from the index: {sorted(pages - linked)}"


def test_spec_pages_link_to_existing_files():
    broken = []
    for page in sorted(SPEC.glob("*.md")):
        for link in _LINK.findall(page.read_text(encoding="utf-8")):
            if not (page.parent / link).resolve().is_file():
                broken.append(f"{page.name} -> {link}")
    assert not broken, f"broken links: {broken}"
