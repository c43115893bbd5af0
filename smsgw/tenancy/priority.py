"""A tenant's priority ceiling (``Tenant.max_priority``, docs/api.md "Priority"): the highest priority
its messages may have on the shared provider account. ``transactional`` messages go first on their own
send queue and may skip quiet hours where the tenant allows it, so on a shared account an operator may
cap a tenant at ``bulk``.

The default ceiling is ``transactional``: what every tenant could do before the ceiling existed, so
nothing changes for a tenant until an operator caps it. A capped tenant:

* asking for more (``priority: "transactional"``) gets a 400 naming ``priority``: refused, not silently
  lowered, so a sender that thought it bought speed learns at once that it did not;
* asking for nothing gets its ceiling (a message's default is ``transactional``, a campaign's ``bulk``);
* stored definitions made before the cap (a schedule's occurrences, a campaign's rows) are made at the
  ceiling: a background job has nobody to answer a 400 to."""

from __future__ import annotations

from smsgw.domain_errors import InvalidInput

TRANSACTIONAL = "transactional"
BULK = "bulk"
CHOICES = [(TRANSACTIONAL, "transactional (no ceiling)"), (BULK, "bulk")]
_RANK = {BULK: 0, TRANSACTIONAL: 1}


def _ceiling(tenant) -> str:
    return tenant.max_priority if tenant.max_priority in _RANK else TRANSACTIONAL


def priority_capped(tenant, priority: str) -> str:
    """``priority``, lowered to the tenant's ceiling (for what was stored before the ceiling was set)."""
    ceiling = _ceiling(tenant)
    return ceiling if _RANK.get(priority, 0) > _RANK[ceiling] else priority


def priority_for(tenant, requested: str | None, *, default: str) -> str:
    """The priority of a new or edited message, schedule or campaign: the one asked for (InvalidInput
    naming ``priority`` above the tenant's ceiling), or the default lowered to the ceiling."""
    if not requested:
        return priority_capped(tenant, default)
    ceiling = _ceiling(tenant)
    if _RANK.get(requested, 0) > _RANK[ceiling]:
        raise InvalidInput(
            "priority",
            f"this account may send at most {ceiling!r} priority; ask the operator to raise it, "
            f"or send {ceiling!r}",
        )
    return requested
