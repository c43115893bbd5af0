"""Every /v1 operation's operationId comes from the written table (smsgw.http.operation_ids), is camelCase
verb + noun, and is used once: generated clients name their functions after them (docs/api.md,
"Generated clients"; tests/integration/test_generated_clients.py)."""

from __future__ import annotations

import re

from drf_spectacular.generators import SchemaGenerator

from smsgw.http.operation_ids import OPERATION_IDS

METHODS = ("get", "put", "post", "delete", "patch")
VERBS = {
    "list", "get", "create", "send", "add", "update", "set", "delete", "remove", "cancel", "pause", "resume",
    "redact", "erase", "resolve", "download", "replay",
}  # fmt: skip


def _operations() -> dict[tuple[str, str], str]:
    spec = SchemaGenerator().get_schema(request=None, public=True)
    return {
        (path, method.upper()): op["operationId"]
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in METHODS
    }


def test_every_operation_has_its_written_operation_id():
    operations = _operations()
    assert operations, "the schema has no operation"
    missing = sorted(set(operations) - set(OPERATION_IDS))
    assert not missing, f"add these to smsgw.http.operation_ids.OPERATION_IDS: {missing}"
    # An id set on a view (extend_schema(operation_id=...)) would win over the table: none may.
    differing = {k: v for k, v in operations.items() if v != OPERATION_IDS[k]}
    assert not differing, differing
    leftover = set(OPERATION_IDS) - set(operations)
    assert not leftover, f"entries for operations the schema no longer has: {sorted(leftover)}"


def test_operation_ids_are_unique_camel_case_verb_noun():
    ids = list(OPERATION_IDS.values())
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for operation_id in ids:
        verb = re.match(r"[a-z]+", operation_id)
        assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)+", operation_id), operation_id
        assert verb and verb.group() in VERBS, operation_id
