"""Test-only URLconf: the real routes plus views that fail, to see what a 500 looks like on the API, on the
receipt endpoint and elsewhere, and what it leaves in the logs (tests/smsgw/http/test_hostile_input.py,
tests/smsgw/runtime/test_log_redaction.py)."""

import json

from django.db import connection, transaction
from django.urls import path

from config.urls import handler500  # noqa: F401 - the project's, as Django finds it in ROOT_URLCONF
from config.urls import urlpatterns as real_urlpatterns
from scheduling.models import Message


def boom(request):
    raise RuntimeError("deliberate failure in a test view")


def message_copy_invalid(message_id: int) -> None:
    """A real failing INSERT on the database: a copy of a stored message with a negative segment count
    (PostgreSQL: a check violation whose DETAIL holds the whole row: number, body, metadata)."""
    original = Message.objects.get(pk=message_id)
    with transaction.atomic():  # a savepoint: the test's own transaction stays usable
        Message.objects.create(
            tenant_id=original.tenant_id,
            to=original.to,
            from_number=original.from_number,
            body=original.body,
            metadata=original.metadata,
            encoding="GSM-7",
            segments=-1,
            due_at=original.due_at,
            expires_at=original.expires_at,
        )


def insert_failure(request):
    message_copy_invalid(json.loads(request.body)["pk"])


def sql_failure(request):
    """Statements whose error text quotes the data: ``LINE 1: …'<body>'…`` and ``invalid input syntax for
    type integer: "<number>"``."""
    message = Message.objects.get(pk=json.loads(request.body)["pk"])
    try:
        with transaction.atomic(), connection.cursor() as cur:
            literal = message.body.replace("'", "''")
            cur.execute(f"SELECT '{literal}' FROM")  # a deliberate syntax error after the literal
    except Exception:
        with transaction.atomic(), connection.cursor() as cur:
            cur.execute("SELECT CAST(%s AS integer) + 'x'", [message.to])
    raise AssertionError("unreachable: both statements fail")


urlpatterns = [
    path("v1/_test/boom", boom),
    path("receipts/_test/boom/", boom),
    path("elsewhere/_test/boom", boom),
    path("v1/_test/insert-failure", insert_failure),
    path("v1/_test/sql-failure", sql_failure),
    *real_urlpatterns,
]
