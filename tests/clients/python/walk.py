"""A Python program using the client openapi-python-client generated from smsgw's schema (the package
``smsgw_client``, generated at test time with config.yaml here): the same walk as tests/clients/ts/walk.ts,
each call by its operationId. tests/integration/test_generated_clients.py puts the generated package on
the path, calls ``walk`` and asserts on what it returns (the TypeScript program prints the same shape)."""

from __future__ import annotations

from typing import Any

from tests.waiting import wait_for


def walk(
    base: str, key: str, *, now_to: str, later_to: str, send_at: str, timezone: str, deadline: float
) -> dict[str, Any]:
    # The generated package, importable only once the test has generated it.
    from smsgw_client import AuthenticatedClient
    from smsgw_client.api.messages import (
        cancel_message,
        get_message,
        list_message_events,
        list_messages,
        send_message,
    )
    from smsgw_client.models import MessageCreateInput, MessageEventsOutput, MessageOutput, MessagePage

    client = AuthenticatedClient(base_url=base, token=key, raise_on_unexpected_status=True)

    def answer(result: Any, kind: type) -> Any:
        # A documented error (an ErrorEnvelope) is returned, not raised: here it is a failure.
        assert isinstance(result, kind), result
        return result

    with client:
        sent = answer(
            send_message.sync(
                client=client, body=MessageCreateInput(to=now_to, body="py: your code is 1234")
            ),
            MessageOutput,
        )
        scheduled = answer(
            send_message.sync(
                client=client,
                body=MessageCreateInput(
                    to=later_to, body="py: see you later", send_at=send_at, timezone=timezone
                ),
                idempotency_key=f"py-later-{send_at}",
            ),
            MessageOutput,
        )
        canceled = answer(cancel_message.sync(scheduled.id, client=client), MessageOutput)
        fetched = answer(get_message.sync(scheduled.id, client=client), MessageOutput)

        def delivered() -> MessageOutput | None:
            got = answer(get_message.sync(sent.id, client=client), MessageOutput)
            return got if got.status == "delivered" else None

        final = wait_for(delivered, deadline, "the message sent now to be delivered", interval=0.2)
        listed = answer(list_messages.sync(client=client, page_size=50), MessagePage)
        timeline = answer(list_message_events.sync(sent.id, client=client), MessageEventsOutput)
    return {
        "sent": {"id": sent.id, "status": sent.status, "to": sent.to},
        "scheduled": {"id": scheduled.id, "status": scheduled.status, "due_at": scheduled.due_at.isoformat()},
        "canceled": {"id": canceled.id, "status": canceled.status},
        "fetched": {"id": fetched.id, "status": fetched.status},
        "final": {"id": final.id, "status": final.status, "provider_message_id": final.provider_message_id},
        "listed": [{"id": m.id, "status": m.status} for m in listed.results],
        "timeline": {"message": timeline.message, "kinds": [e.kind for e in timeline.events]},
    }
