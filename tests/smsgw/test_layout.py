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


@pytest.mark.parametrize("package", APP_PACKAGES)
def test_app_packages_do_not_import_tooling(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(name for name in _imports(path) if _tooling(name))
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and "sandbox" not in path.parts  # a provider's sandbox is tooling
    }
    assert {k: v for k, v in offenders.items() if v} == {}
