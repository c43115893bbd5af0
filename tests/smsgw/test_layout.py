"""Product code and tooling apart: the app packages never import the bench package or its dev-only
dependencies at module level (the bench command imports its scenarios inside handle())."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP_PACKAGES = ("smsgw", "scheduling", "delivery", "receipts")
TOOLING_ONLY = ("bench", "psutil")


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    # Function bodies are skipped on purpose: a lazy import there runs only when the tool is used.
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return names


@pytest.mark.parametrize("package", APP_PACKAGES)
def test_app_packages_do_not_import_tooling_at_module_level(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(_module_level_imports(path) & set(TOOLING_ONLY))
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    assert {k: v for k, v in offenders.items() if v} == {}
