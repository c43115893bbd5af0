"""What a keyword does (docs/inbound.md, "Keywords and actions"), inside the transaction that processes its
inbound message, so an action and the message's record of it commit together or not at all.

Each returns what it changed (``InboundMessage.action_result``, the audit the tenant and operators see).
"""

from __future__ import annotations

from dataclasses import dataclass

from delivery.guards import suppression
from inbound.keywords import Match
from inbound.models import InboundMessage, KeywordAction


@dataclass(frozen=True)
class Replied:
    """The message an inbound one answers (its in_reply_to), as the actions need it."""

    id: int
    public_id: str
    status: str
    schedule_id: int | None
    campaign_id: int | None


def keyword_apply(inbound: InboundMessage, match: Match, replied: Replied | None) -> dict:
    """Apply the keyword's action for the inbound message's tenant; returns the action's result."""
    assert inbound.tenant_id is not None
    sender = inbound.sender_pool or inbound.to_number
    if match.action == KeywordAction.HELP:
        suppression.help_record(tenant_id=inbound.tenant_id, number=inbound.from_number, sender=sender)
        return {"recorded": True}
    if match.action in (KeywordAction.OPT_OUT, KeywordAction.OPT_IN):
        change = (
            suppression.suppression_add
            if match.action == KeywordAction.OPT_OUT
            else suppression.suppression_remove
        )
        changed = change(
            tenant_id=inbound.tenant_id,
            number=inbound.from_number,
            sender=sender,
            source="inbound_keyword",
            actor="recipient",
            keyword=match.keyword,
        )
        return {"changed": changed, "sender": sender}
    return {}
