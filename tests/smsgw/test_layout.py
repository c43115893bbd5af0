"""Product code and tooling apart: the app packages never import the bench package, the sandbox framework,
a provider's sandbox (``delivery/providers/<name>/sandbox/``, itself tooling) or the benchmarks' dev-only
dependencies, at module level or inside a function (``python -m bench`` and ``python -m
delivery.providers.<name>.sandbox`` are the tools' own entry points). import-linter checks the same on the import
graph (pyproject.toml); this test also names the file and keeps the rule when lint-imports is not run."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP_PACKAGES = ("config", "reporting", "smsgw", "scheduling", "delivery", "receipts")
TOOLING_ONLY = ("bench", "sandbox", "psutil")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _tooling(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in TOOLING_ONLY or "sandbox" in parts  # a provider's sandbox too


def _tooling_file(path: Path) -> bool:
    """A provider package's tooling: its sandbox, its tests, and its kit (the tooling's door to its
    sandbox: the embedded run and the test harness start the sandbox through it)."""
    parts = path.relative_to(ROOT).parts
    in_provider = parts[:2] == ("delivery", "providers") and len(parts) > 3
    return "sandbox" in parts or (in_provider and (parts[3] == "tests" or parts[3] == "kit.py"))


@pytest.mark.parametrize("package", APP_PACKAGES)
def test_app_packages_do_not_import_tooling(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(name for name in _imports(path) if _tooling(name))
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and not _tooling_file(path)
    }
    assert {k: v for k, v in offenders.items() if v} == {}
