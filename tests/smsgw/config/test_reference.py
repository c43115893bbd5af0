"""docs/settings.md is the settings reference made from the code (smsgw.config.reference): it is what the
code says today, every variable the code reads is on it with a meaning, and a read the scan cannot name
fails instead of being left out."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from smsgw.config import reference

ROOT = Path(__file__).resolve().parents[3]
# A second, independent look at the code: a plain pattern over the sources for a variable name passed to a
# reader, os.environ or os.getenv, or read with a default in the deploy scripts. Whatever it finds must be
# on the page, so a read the AST scan misses (a new reader, a new file) fails here.
_PYTHON_READ = re.compile(
    r"(?:env_(?:str|secret|bool|int|float|list|pairs|choice|json_object|is_set)|os\.environ\.get|os\.environ\.setdefault"
    r"|os\.getenv)\(\s*\"([A-Z][A-Z0-9_]+)\"|os\.environ\[\"([A-Z][A-Z0-9_]+)\"\]"
)
_SHELL_READ = re.compile(r"\$\{((?:SMSGW|DJANGO|DATABASE|CELERY)_[A-Z0-9_]+)")


def _python_sources() -> list[Path]:
    out = []
    for root in reference.PYTHON_ROOTS:
        for path in (ROOT / root).rglob("*.py"):
            if not reference.SKIPPED_PARTS & set(path.relative_to(ROOT).parts):
                out.append(path)
    return out + sorted((ROOT / "deploy").glob("*.py"))


def test_the_page_is_what_the_code_says():
    assert reference.PAGE.read_text() == reference.render(), (
        "docs/settings.md differs from the code: run `.venv/bin/python manage.py settings_reference --write`"
    )


def test_every_variable_the_code_reads_is_on_the_page_with_a_meaning():
    page = reference.PAGE.read_text()
    found = set()
    for path in _python_sources():
        for match in _PYTHON_READ.finditer(path.read_text()):
            found.add(match[1] or match[2])
    for pattern in reference.SHELL_FILES:
        for path in ROOT.glob(pattern):
            found.update(_SHELL_READ.findall(path.read_text()))
    assert len(found) > 150, found  # the pattern still finds the settings at all
    missing = sorted(name for name in found if f"| `{name}` |" not in page)
    assert not missing, f"read by the code, not in docs/settings.md: {missing}"
    unexplained = [s.name for s in reference.settings().values() if not s.first("meaning")]
    assert not unexplained, f"no comment above the line that reads: {unexplained}"


def test_the_production_env_example_names_only_settings_on_the_page():
    page = reference.PAGE.read_text()
    example = (ROOT / "deploy/systemd/smsgw.env.example").read_text()
    names = re.findall(r"^#?([A-Z][A-Z0-9_]+)=", example, flags=re.MULTILINE)
    assert names
    assert [n for n in names if f"| `{n}` |" not in page] == []


def test_a_read_by_a_computed_name_is_an_error_not_a_gap():
    source = 'import os\nfor name in ("A", "B"):\n    os.environ.get(name)\n'
    visitor = reference._Visitor(ROOT / "example.py", source, ast.parse(source))
    with pytest.raises(reference.ScanError, match=r"example\.py:3"):
        visitor.visit(ast.parse(source))


def test_a_default_used_only_when_unset_and_a_comment_above_are_read():
    source = (
        "from smsgw.config.env import env_int, env_is_set\n"
        "# Requests in flight.\n"
        'X = env_int("SMSGW_X", 1, minimum=1) if env_is_set("SMSGW_X") else None\n'
        "# Seconds.\n"
        'Y = env_int("SMSGW_Y", 48 * 3600, minimum=60)\n'
    )
    visitor = reference._Visitor(ROOT / "example.py", source, ast.parse(source))
    visitor.visit(ast.parse(source))
    x, y = visitor.reads
    assert (x.name, x.default, x.bounds, x.meaning) == (
        "SMSGW_X",
        "(unset: see meaning)",
        "≥ 1",
        "Requests in flight.",
    )
    assert (y.name, y.kind, y.default, y.bounds, y.meaning) == (
        "SMSGW_Y",
        "integer",
        "172_800",
        "≥ 60",
        "Seconds.",
    )


def test_the_command_checks_the_page():
    env = {"SMSGW_ENV": "test", "DJANGO_SECRET_KEY": "test-only-secret", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "manage.py", "settings_reference", "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
