"""The checks at acceptance that other apps own: is the recipient on the tenant's suppression list for
this sender, and may the tenant send to this destination at all (allowed countries, denied ranges).

Scheduling asks them through this port and never imports the app that answers: the implementation is
the module named by ``settings.ACCEPTANCE_CHECKS`` (the composition root, smsgw/settings.py; today
delivery's guards). A refusal is a 400 naming ``to`` for one message and a skipped recipient for a
campaign; nothing is stored for it either way.
"""

from __future__ import annotations

from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING, Protocol

from django.conf import settings

if TYPE_CHECKING:
    from smsgw.models import Tenant


class Refusal(Protocol):
    code: str
    message: str


class AcceptanceChecks(Protocol):
    def is_suppressed(
        self, *, tenant_id: int, number: str, from_number: str, messaging_service_sid: str
    ) -> bool: ...

    def suppressed_numbers(
        self, *, tenant_id: int, numbers: list[str], from_number: str, messaging_service_sid: str
    ) -> set[str]: ...

    def destination_refusals(self, tenant: Tenant, numbers: list[str]) -> dict[str, Refusal]: ...


@cache
def _checks() -> AcceptanceChecks:
    module: AcceptanceChecks = import_module(settings.ACCEPTANCE_CHECKS)
    return module


def is_suppressed(*, tenant_id: int, number: str, from_number: str, messaging_service_sid: str) -> bool:
    return _checks().is_suppressed(
        tenant_id=tenant_id,
        number=number,
        from_number=from_number,
        messaging_service_sid=messaging_service_sid,
    )


def suppressed_numbers(
    *, tenant_id: int, numbers: list[str], from_number: str, messaging_service_sid: str
) -> set[str]:
    return _checks().suppressed_numbers(
        tenant_id=tenant_id,
        numbers=numbers,
        from_number=from_number,
        messaging_service_sid=messaging_service_sid,
    )


def destination_refusals(tenant: Tenant, numbers: list[str]) -> dict[str, Refusal]:
    return _checks().destination_refusals(tenant, numbers)


def destination_refusal(tenant: Tenant, number: str) -> Refusal | None:
    return destination_refusals(tenant, [number]).get(number)
