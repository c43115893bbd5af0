"""The house's measures (issue 39; docs/architecture.md, "The house, measured"): run from a checkout's
root with the project's Python, ``.venv/bin/python deploy/measure-house.py``. Prints one line per
measure. Reads the sources only (ast, tokenize, grimp); imports nothing of the project."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

import grimp

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))
# The floors, bottom up: a package may import its own floor and the ones below.
FLOORS = ["smsgw", "scheduling", "delivery", "receipts", "inbound", "reporting", "retention", "config"]
APPS = ["smsgw", "scheduling", "delivery", "receipts"]
STAGES = ["scheduling", "delivery", "receipts"]
# Settings Django and its libraries read, naming a class or module for the framework to load.
FRAMEWORK_SETTINGS = ("ROOT_URLCONF", "WSGI_APPLICATION", "AXES_", "CELERY_")
# The facade and the Twilio package are where the Twilio word belongs.
SID_HOMES = ("scheduling/facade/", "delivery/providers/twilio/")


def _tooling(parts: tuple[str, ...]) -> bool:
    """A provider package's tooling, not the app: its sandbox, its tests and its kit."""
    in_provider = parts[:2] == ("delivery", "providers") and len(parts) > 3
    return "sandbox" in parts or (in_provider and parts[3] in ("tests", "kit.py", "kit"))


def _sources(packages: list[str]) -> list[Path]:
    return [
        p
        for top in packages
        if (ROOT / top).is_dir()
        for p in sorted((ROOT / top).rglob("*.py"))
        if "migrations" not in p.parts and not _tooling(p.relative_to(ROOT).parts)
    ]


def imports_up() -> list[tuple[str, str]]:
    present = [p for p in FLOORS if (ROOT / p).is_dir()]
    graph = grimp.build_graph(*present, cache_dir=None)
    pairs = set()
    for module in graph.modules:
        if _tooling(tuple(module.split("."))):
            continue
        a = module.split(".")[0]
        for imported in graph.find_modules_directly_imported_by(module):
            b = imported.split(".")[0]
            if b in present and FLOORS.index(b) > FLOORS.index(a):
                pairs.add((a, b))
    return sorted(pairs)


def _code_strings(path: Path):
    """String literals in code: not docstrings, not comments."""
    text = path.read_text()
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(first.lineno)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.STRING and tok.start[0] not in docstrings:
            yield tok.start[0], ast.literal_eval(tok.string) if not tok.string.startswith(("f", "F")) else ""


DOTTED = re.compile(r"^(smsgw|scheduling|delivery|receipts)(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _task_owners() -> dict[str, str]:
    """Each Celery task name declared in the apps (``@shared_task(name=...)``) and its app."""
    tasks: dict[str, str] = {}
    for path in _sources(APPS):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [kw.value for kw in getattr(node, "keywords", []) if kw.arg == "name"]
            declares = isinstance(node, ast.Call) and ast.unparse(node.func).endswith("task")
            if declares and names and isinstance(names[0], ast.Constant):
                tasks[names[0].value] = path.relative_to(ROOT).parts[0]
    return tasks


def _stage_strings(tasks: dict[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in _sources(STAGES):
        own = path.relative_to(ROOT).parts[0]
        for line, value in _code_strings(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if not isinstance(value, str):
                continue
            if value in tasks and tasks[value] != own:
                found.setdefault(f"task {value}", where)
            elif (
                value not in tasks
                and DOTTED.match(value)
                and value.split(".")[0] != own
                and _module_path(value)
            ):
                found.setdefault(value, where)
    return found


def _settings_strings() -> dict[str, str]:
    """Top-level settings of the project's own (not the framework's) whose value names an app module."""
    found: dict[str, str] = {}
    for path in [ROOT / "smsgw" / "settings.py", *sorted((ROOT / "config" / "settings").glob("*.py"))]:
        if not path.is_file():
            continue
        for node in ast.parse(path.read_text()).body:
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
                continue
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            value = node.value.value
            ours = names and not names[0].startswith(FRAMEWORK_SETTINGS)
            if ours and isinstance(value, str) and DOTTED.match(value) and _module_path(value):
                found.setdefault(value, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def string_hand_offs() -> list[str]:
    """Distinct targets one stage (scheduling, delivery, receipts) reaches in another by a string instead
    of an import: a dotted path to another app's module or function in the stage's code (or in a setting
    of the project's own that names the module answering a stage, such as the old ``ACCEPTANCE_CHECKS``),
    or another app's Celery task published by name. Django's ``"app_label.Model"`` references are not
    module paths and are not counted; nor are the framework's own settings (INSTALLED_APPS, MIDDLEWARE,
    REST_FRAMEWORK and the like), which name classes for Django to load."""
    found = {**_stage_strings(_task_owners()), **_settings_strings()}
    return [f"{where}: {target}" for target, where in sorted(found.items(), key=lambda kv: kv[1])]


def _module_path(dotted: str) -> bool:
    """True when the string names a module under a top package (and maybe an attribute of it)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:cut])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def long_functions(limit: int = 100) -> list[str]:
    out = []
    for path in _sources(APPS):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} {length}")
    return out


def complexity_noqa() -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _sources(APPS)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"noqa:.*(C901|PLR0915)", line)
    ]


def largest_modules(count: int = 5) -> list[tuple[int, str]]:
    sizes = [(len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in _sources(APPS)]
    return sorted(sizes, reverse=True)[:count]


def sid_files() -> list[str]:
    out = []
    for path in _sources(["config", "reporting", *APPS]):
        rel = path.relative_to(ROOT).as_posix()
        # A model field's ``db_column`` names storage the previous release still reads (docs/deploy.md):
        # not the core naming the concept.
        lines = [line for line in path.read_text().splitlines() if "db_column=" not in line]
        if not rel.startswith(SID_HOMES) and any("messaging_service_sid" in line for line in lines):
            out.append(rel)
    return out


def main() -> None:
    up = imports_up()
    print(f"imports pointing back up the pipeline (house level): {len(up)} {up}")
    handoffs = string_hand_offs()
    print(f"string hand-offs between stages: {len(handoffs)}")
    for line in handoffs:
        print("   ", line)
    longs = long_functions()
    print(f"functions over 100 lines in the apps: {len(longs)} {longs}")
    print(f"complexity noqa in the apps: {len(complexity_noqa())} {complexity_noqa()}")
    print(f"largest modules in the apps: {largest_modules()}")
    sids = sid_files()
    print(f"files naming messaging_service_sid outside the facade and the Twilio package: {len(sids)}")


if __name__ == "__main__":
    sys.exit(main())
