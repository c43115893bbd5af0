"""The checks at acceptance that other apps own: is the recipient on the tenant's suppression list for
this sender, and may the tenant send to this destination at all (allowed countries, denied ranges).

Scheduling asks them through this port and never imports the app that answers: the implementation is
the one the composition root hands it (config.wiring, through smsgw.stages; today delivery's guards).
A refusal is a 400 naming ``to`` for one message and a skipped recipient for a campaign; nothing is
stored for it either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from smsgw import stages
from smsgw.stages import AcceptanceChecks, Refusal

if TYPE_CHECKING:
    from smsgw.models import Tenant


def _checks() -> AcceptanceChecks:
    return stages.acceptance_checks()


def is_suppressed(*, tenant_id: int, number: str, from_number: str, sender_pool: str) -> bool:
    return _checks().is_suppressed(
        tenant_id=tenant_id,
        number=number,
        from_number=from_number,
        sender_pool=sender_pool,
    )


def suppressed_numbers(*, tenant_id: int, numbers: list[str], from_number: str, sender_pool: str) -> set[str]:
    return _checks().suppressed_numbers(
        tenant_id=tenant_id,
        numbers=numbers,
        from_number=from_number,
        sender_pool=sender_pool,
    )


def destination_refusals(tenant: Tenant, numbers: list[str]) -> Mapping[str, Refusal]:
    return _checks().destination_refusals(tenant, numbers)


def destination_refusal(tenant: Tenant, number: str) -> Refusal | None:
    return destination_refusals(tenant, [number]).get(number)
