"""The timeline's kinds as the code writes them, against EventKind (the API's `kind` enum): a kind written
anywhere and missing from the list would be a value a generated client cannot read."""

from __future__ import annotations

import ast
from pathlib import Path

from scheduling.lifecycle.kinds import EventKind

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("scheduling", "delivery", "receipts", "retention", "inbound", "smsgw", "reporting")


def _strings(node: ast.AST, constants: dict[str, str]) -> list[str]:
    """The kind a value names: a literal, either branch of `a if c else b`, or a module constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body, constants) + _strings(node.orelse, constants)
    if isinstance(node, ast.Name) and node.id in constants:
        return [constants[node.id]]
    return []


def _kinds_written(tree: ast.Module) -> set[str]:
    """Where a kind is given: `kind=` of any call (transitions, notes), a `"kind":` key (keyword
    arguments built as a dict), the first argument of an outcome `Move`, the fourth of a gate's `Park`, and
    the second of a note tuple `(message_id, kind, status, details)` for events_record_many."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    kinds: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            for keyword in node.keywords:
                if keyword.arg == "kind":
                    kinds.update(_strings(keyword.value, constants))
            if name == "Move" and node.args:
                kinds.update(_strings(node.args[0], constants))
            if name == "Park" and len(node.args) >= 4:
                kinds.update(_strings(node.args[3], constants))
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "kind":
                    kinds.update(_strings(value, constants))
        elif isinstance(node, ast.Tuple) and len(node.elts) == 4:
            _, kind, status, details = node.elts
            is_note = isinstance(details, ast.Dict) or getattr(details, "id", "") == "details"
            if is_note and not isinstance(status, ast.Constant):
                kinds.update(_strings(kind, constants))
    return kinds


def _project_files():
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if not {"tests", "migrations", "sandbox"} & set(path.relative_to(ROOT).parts):
                yield path


def test_every_kind_the_code_writes_is_in_the_api_enum():
    written: dict[str, str] = {}
    for path in _project_files():
        for kind in _kinds_written(ast.parse(path.read_text())):
            written.setdefault(kind, str(path.relative_to(ROOT)))
    # The collector still finds each way (a literal, a Move, a note tuple): it has not gone blind.
    assert {"created", "sent", "failed", "receipt", "reply_received", "redacted"} <= written.keys()
    missing = {kind: where for kind, where in written.items() if kind not in EventKind.values}
    assert not missing, f"timeline kinds written but not in scheduling.lifecycle.kinds.EventKind: {missing}"


def test_the_collector_sees_each_way_a_kind_is_given():
    source = """
KIND = "failover"
transition(1, kind=KIND)
transition(1, kind="queued" if first else "republished")
Move("throttled", QUEUED, False)
Park(until, REASON, text, "paced", {})
common = {"kind": "cancelled"}
notes.append((mid, "receipt", msg["status"], {"note": "x"}))
"""
    assert _kinds_written(ast.parse(source)) == {
        "failover",
        "queued",
        "republished",
        "throttled",
        "paced",
        "cancelled",
        "receipt",
    }
