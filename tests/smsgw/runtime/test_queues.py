"""One list of queues (smsgw.runtime.queues.ROUTED_QUEUES), held to what the code publishes and to what the
deploy examples run: a queue the code routes to with no worker line in docs/deploy.md's production block, the
Procfile or the systemd examples leaves its tasks waiting for ever (every campaign ``creating``), and a
publish to a queue missing from the list would be one readiness and /metrics never look at."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.conf import settings

from scheduling.dispatch.recovery import send_queue
from scheduling.models import Priority
from smsgw.runtime.queues import ROUTED_QUEUES, SEND_PREFIX

ROOT = Path(__file__).resolve().parents[3]
APP_PACKAGES = ("config", "reporting", "smsgw", "scheduling", "delivery", "receipts")
PUBLISH_METHODS = {"send_task", "apply_async", "delay", "signature", "s", "si"}
ROUTED = set(ROUTED_QUEUES)


# --- what the code publishes -----------------------------------------------------------------------


def _modules() -> dict[Path, ast.Module]:
    return {
        path: ast.parse(path.read_text(), filename=str(path))
        for package in APP_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


def _task_names(modules: dict[Path, ast.Module]) -> dict[str, str]:
    """{function name: registered task name} of every ``@shared_task(name=...)``."""
    names = {}
    for tree in modules.values():
        for node in ast.walk(tree):
            decorators = node.decorator_list if isinstance(node, ast.FunctionDef) else []
            for deco in decorators:
                if isinstance(deco, ast.Call) and _called(deco) in ("shared_task", "task"):
                    for kw in deco.keywords:
                        if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                            names[node.name] = kw.value.value
    return names


def _called(call: ast.Call) -> str:
    """The called name: ``f`` of ``f(...)`` and of ``x.f(...)``."""
    return getattr(call.func, "id", None) or getattr(call.func, "attr", "")


def _params(function: ast.FunctionDef) -> list[str]:
    return [a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)]


class QueueResolver:
    """The queue names an expression given as ``queue=`` can take: a literal; ``send_queue(priority)``
    (one per priority class); or a parameter of the enclosing function, resolved at each call of that
    function in the same module. Anything else is reported, so a new way of choosing a queue is looked at
    by whoever adds it."""

    def __init__(self, path: Path, tree: ast.Module):
        self.path, self.tree, self.parents = path, tree, _parents(tree)
        self.unresolved: list[str] = []

    def resolve(self, expr: ast.AST, depth: int = 0) -> set[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return {expr.value}
        if isinstance(expr, ast.Call) and _called(expr) == "send_queue":
            return {send_queue(p) for p in Priority.values}
        if isinstance(expr, ast.Name) and depth < 5:
            found = self._parameter(expr)
            if found is not None:
                function, index = found
                values: set[str] = set()
                calls = [
                    c for c in ast.walk(self.tree) if isinstance(c, ast.Call) and _called(c) == function.name
                ]
                for call in calls:
                    arg = self._argument(call, function, index)
                    if arg is None:
                        self.unresolved.append(
                            f"{_where(self.path, call)}: {function.name}() without a queue"
                        )
                    else:
                        values |= self.resolve(arg, depth + 1)
                if calls:
                    return values
        self.unresolved.append(f"{_where(self.path, expr)}: queue={ast.unparse(expr)}")
        return set()

    def _parameter(self, name: ast.Name) -> tuple[ast.FunctionDef, int] | None:
        node = self.parents.get(name)
        while node is not None:
            if isinstance(node, ast.FunctionDef):
                params = _params(node)
                return (node, params.index(name.id)) if name.id in params else None
            node = self.parents.get(node)
        return None

    @staticmethod
    def _argument(call: ast.Call, function: ast.FunctionDef, index: int) -> ast.AST | None:
        params = _params(function)
        for kw in call.keywords:
            if kw.arg == params[index]:
                return kw.value
        return call.args[index] if index < len(call.args) else None


def _publishes() -> tuple[dict[str, set[str]], list[str], list[str]]:
    """Every publish in the app packages: {site: queues it can go to}, the sites whose queue cannot be
    told, and the sites that name no queue and publish a task without a route (to Celery's default
    queue, which no worker consumes)."""
    modules = _modules()
    task_names = _task_names(modules)
    routes = settings.CELERY_TASK_ROUTES
    sites: dict[str, set[str]] = {}
    unresolved: list[str] = []
    unrouted: list[str] = []
    for path, tree in modules.items():
        resolver = QueueResolver(path, tree)
        for call in ast.walk(tree):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            if call.func.attr not in PUBLISH_METHODS:
                continue
            queue = next((kw.value for kw in call.keywords if kw.arg == "queue"), None)
            if call.func.attr == "send_task":
                first = call.args[0] if call.args else None
                task = first.value if isinstance(first, ast.Constant) else None
            else:
                task = task_names.get(getattr(call.func.value, "id", ""))
                if task is None and queue is None:
                    # A method of something that is not one of our tasks. With a queue it is a publish
                    # whatever it is called on: a task handed over through a stage slot
                    # (``stages.send_batch().apply_async(..., queue=...)``).
                    continue
            if queue is not None:
                sites[_where(path, call)] = resolver.resolve(queue)
            elif task in routes:
                sites[_where(path, call)] = {routes[task]["queue"]}
            else:
                unrouted.append(f"{_where(path, call)}: {task or ast.unparse(call)}")
        unresolved += resolver.unresolved
    return sites, unresolved, unrouted


def test_every_publish_names_a_routed_queue():
    sites, unresolved, unrouted = _publishes()
    assert unresolved == [], "queues the test cannot tell: name them literally or through send_queue()"
    assert unrouted == [], "tasks published with no queue and no CELERY_TASK_ROUTES entry"
    assert len(sites) >= 5, sites  # the release, sweep, campaign control and campaign creation publishes
    strays = {site: sorted(queues - ROUTED) for site, queues in sites.items() if queues - ROUTED}
    assert strays == {}, "add these queues to smsgw.runtime.queues.ROUTED_QUEUES (and a worker for each)"


def test_every_route_and_beat_entry_names_a_routed_queue():
    entries = settings.CELERY_BEAT_SCHEDULE
    assert [n for n, e in entries.items() if "queue" not in e.get("options", {})] == [], "beat entries"
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    beat = {entry["options"]["queue"] for entry in entries.values()}
    assert routed <= ROUTED, routed - ROUTED
    assert beat <= ROUTED, beat - ROUTED


def test_the_send_queues_are_one_per_priority_class():
    assert {send_queue(p) for p in Priority.values} == {q for q in ROUTED if q.startswith(SEND_PREFIX)}


def test_every_routed_queue_is_published_to():
    """The list holds no queue nothing sends to: the deploy examples would run a worker for nothing."""
    sites, _, _ = _publishes()
    used = set().union(*sites.values())
    used |= {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    used |= {entry["options"]["queue"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert used >= ROUTED, ROUTED - used


def test_the_resolver_reports_a_queue_it_cannot_tell():
    source = "def publish(app, pick):\n    app.send_task('x', queue=pick())\n"
    path = ROOT / "scheduling" / "example.py"  # a name inside the repository, for the message only
    resolver = QueueResolver(path, ast.parse(source))
    call = next(n for n in ast.walk(resolver.tree) if isinstance(n, ast.Call) and n.keywords)
    assert resolver.resolve(call.keywords[0].value) == set()
    assert resolver.unresolved == ["scheduling/example.py:2: queue=pick()"]


# --- what the deploy examples run ------------------------------------------------------------------


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    end = text.find("\n## ", start + len(heading) + 2)
    return text[start : end if end != -1 else len(text)]


def _sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def _worker_queues(lines: str) -> set[str]:
    """The queues of every ``celery ... worker -Q a,b`` line (docs/deploy.md's ``$W -Q ...`` shorthand
    too)."""
    queues = set()
    for line in lines.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for listed in re.findall(r"\s-Q\s+(\S+)", line):
            queues |= set(listed.split(","))
    return queues


def _instances(text: str) -> set[str]:
    """The queues of every ``smsgw-worker@<queue list>`` instance named."""
    queues = set()
    for name in re.findall(r"smsgw-worker@([a-z][a-z0-9._,-]*)", text):
        queues |= set(name.removesuffix(".service").split(","))
    return queues


DEPLOY = (ROOT / "docs" / "deploy.md").read_text()
PRODUCTION = _section(DEPLOY, "## Production")
CHECKLIST = _section(DEPLOY, "## Production checklist")


def test_the_readme_production_block_runs_a_worker_for_every_routed_queue():
    block = _sh_blocks(PRODUCTION)[0]  # the first block under "Production": the processes to run
    assert "celery -A config beat" in block
    assert _worker_queues(block) == ROUTED, {"missing": ROUTED - _worker_queues(block)}


def test_the_readme_systemd_example_enables_a_worker_for_every_routed_queue():
    # The checklist's units step (docs/deploy.md, "Production checklist").
    enabling = [b for b in _sh_blocks(CHECKLIST) if "systemctl enable" in b]
    assert len(enabling) == 1, "one block enables the units"
    assert _instances(enabling[0]) == ROUTED, {"missing": ROUTED - _instances(enabling[0])}


def test_the_worker_unit_lists_an_instance_for_every_routed_queue():
    unit = (ROOT / "deploy" / "systemd" / "smsgw-worker@.service").read_text()
    examples = "\n".join(line for line in unit.splitlines() if line.startswith("#"))
    assert _instances(examples) == ROUTED, {"missing": ROUTED - _instances(examples)}
    assert "-Q %i" in unit, "the instance name is the queue list"


def test_the_procfile_runs_a_worker_for_every_routed_queue():
    procfile = (ROOT / "deploy" / "Procfile").read_text()
    assert _worker_queues(procfile) == ROUTED, {"missing": ROUTED - _worker_queues(procfile)}


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ("$W -Q sweep -c 1 -n sweep@%h\n$W -Q send.bulk,send.transactional -c 4", {"sweep", "send.bulk", "send.transactional"}),
        ("# $W -Q campaigns (a comment runs nothing)\n", set()),
    ],
)  # fmt: skip
def test_worker_lines_are_read_as_a_process_manager_would(lines, expected):
    assert _worker_queues(lines) == expected
