"""Destination permissions (docs/guards.md): which numbers a tenant may send to at all. Checked at acceptance
(scheduling.messages.service, scheduling.schedules.service: a 400 naming ``to``, nothing stored) and again at
execution (delivery.guards.screening: a message whose destination became refused is cancelled, never
submitted).

Two rules, deny list first (its answer is the more specific one):

* a deny list of E.164 prefixes: the shipped one (delivery/data/deny_prefixes.txt: premium-rate and
  high-risk ranges), the deployment's (SMSGW_DENY_PREFIXES_FILE, SMSGW_DENY_PREFIXES) and the tenant's
  own (``Tenant.deny_prefixes``); a tenant can be exempted from ranges (``Tenant.deny_exempt_prefixes``:
  a number starting with one of them skips the deny list, not the country rule);
* allowed countries: ``Tenant.allowed_countries`` (ISO 3166 alpha-2; ``"*"`` = any), empty meaning the
  tenant's own country only (``Tenant.country``, else the region of its E.164 default_from, else
  SMSGW_DEFAULT_COUNTRY). The country of a number is libphonenumber's region for it, so NANP numbers
  are told apart by area code (+1 876 is Jamaica, not the US); non-geographic numbers (+881, +882, ...)
  have region "001" and are never in a country list.

Campaigns call ``destination_refusals(tenant, numbers)`` for a whole recipient list; the cost is one
parse per number (about 10 µs) and a few set lookups: no database work.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

import phonenumbers
from django.conf import settings

from scheduling.lifecycle.reasons import ReasonCode
from smsgw.models import Tenant
from smsgw.values.digits import is_ascii_digits

SHIPPED_DENY_FILE = Path(__file__).resolve().parent.parent / "data" / "deny_prefixes.txt"
ANY_COUNTRY = "*"
NON_GEOGRAPHIC = "001"  # libphonenumber's region code for +800, +808, +870, +881, +882, +883, +979, ...

REASON_REFUSED = ReasonCode.DESTINATION_REFUSED  # Message.reason_code of a message refused at execution
COUNTRY_NOT_ALLOWED = "country_not_allowed"
PREMIUM_RATE = "premium_rate_destination"  # a shipped deny-list range
DENIED_PREFIX = "denied_prefix"  # a range the deployment or the tenant denied


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str


class DenyListError(ValueError):
    pass


def prefixes_parse(text: str, *, source: str) -> list[str]:
    """Lines of digits (an optional leading "+"); "#" starts a comment. Raises on anything else, so a
    typo in an operator's file stops the process at start-up instead of silently allowing a range."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        value = line.split("#", 1)[0].strip().removeprefix("+")
        if not value:
            continue
        if not is_ascii_digits(value) or not 1 <= len(value) <= 15:  # "١٢" would never match a number
            raise DenyListError(f"{source}:{n}: {value!r} is not an E.164 prefix (digits after +)")
        out.append(value)
    return out


def prefix_clean(raw: str) -> str:
    """One prefix as stored on a tenant: digits only. Raises DenyListError."""
    return prefixes_parse(str(raw), source="prefix")[0] if str(raw).strip() else ""


@cache
def _deployment_deny() -> dict[str, str]:
    """Prefix -> refusal code for the shipped list and the deployment's additions (read once)."""
    deny = dict.fromkeys(
        prefixes_parse(SHIPPED_DENY_FILE.read_text(), source=str(SHIPPED_DENY_FILE)), PREMIUM_RATE
    )
    if settings.DENY_PREFIXES_FILE:
        path = Path(settings.DENY_PREFIXES_FILE)
        for prefix in prefixes_parse(path.read_text(), source=str(path)):
            deny.setdefault(prefix, DENIED_PREFIX)
    for prefix in prefixes_parse("\n".join(settings.DENY_PREFIXES), source="SMSGW_DENY_PREFIXES"):
        deny.setdefault(prefix, DENIED_PREFIX)
    return deny


def deny_cache_clear() -> None:
    _deployment_deny.cache_clear()


def tenant_country(tenant: Tenant) -> str:
    """The tenant's own country: its setting, else its E.164 default_from's region, else the default."""
    if tenant.country:
        return tenant.country.upper()
    if tenant.default_from.startswith("+"):
        region = _region(tenant.default_from)
        if region and region != NON_GEOGRAPHIC:
            return region
    return settings.DEFAULT_COUNTRY


def allowed_countries(tenant: Tenant) -> frozenset[str]:
    listed = {str(c).strip().upper() for c in tenant.allowed_countries or () if str(c).strip()}
    return frozenset(listed or {tenant_country(tenant)})


# A country calling code that belongs to one region answers without parsing the number (a parse is
# about 50 µs: most of a whole batch's check). Shared codes need libphonenumber's per-region patterns.
_SINGLE_REGION = {str(cc): r[0] for cc, r in phonenumbers.COUNTRY_CODE_TO_REGION_CODE.items() if len(r) == 1}
_SHARED_CODE = {str(cc) for cc, r in phonenumbers.COUNTRY_CODE_TO_REGION_CODE.items() if len(r) > 1}
_nanp: dict[str, str] = {}


@lru_cache(maxsize=65536)
def _region_parsed(number: str) -> str:
    try:
        return phonenumbers.region_code_for_number(phonenumbers.parse(number, None)) or ""
    except phonenumbers.NumberParseException:
        return ""


def _region(number: str) -> str:
    """libphonenumber's region of an E.164 number ("" if it has none)."""
    digits = number.removeprefix("+")
    for n in (1, 2, 3):  # country calling codes are prefix-free
        code = digits[:n]
        if code in _SINGLE_REGION:
            return _SINGLE_REGION[code]
        if code == "1":
            # NANP: each area code (NPA) is assigned to one country, so the first valid number seen in
            # an NPA answers for all of them (numbers reach here already validated at acceptance).
            npa = digits[:4]
            region = _nanp.get(npa)
            if region is None:
                region = _region_parsed(number)
                if region:
                    _nanp[npa] = region
            return region
        if code in _SHARED_CODE:
            return _region_parsed(number)
    return ""


class _Checker:
    """One tenant's rules, prepared once for a list of numbers."""

    def __init__(self, tenant: Tenant):
        self.deny = dict(_deployment_deny())
        for prefix in tenant.deny_prefixes or ():
            self.deny.setdefault(str(prefix).removeprefix("+"), DENIED_PREFIX)
        self.lengths = sorted({len(p) for p in self.deny})
        self.exempt = tuple(str(p).removeprefix("+") for p in tenant.deny_exempt_prefixes or () if str(p))
        self.countries = allowed_countries(tenant)
        self.any_country = ANY_COUNTRY in self.countries
        self.regions: dict[str, str] = {}

    def refusal(self, number: str) -> Refusal | None:
        digits = number.removeprefix("+")
        if not (self.exempt and digits.startswith(self.exempt)):
            for length in self.lengths:
                code = self.deny.get(digits[:length])
                if code is not None:
                    what = "premium-rate or high-risk" if code == PREMIUM_RATE else "denied"
                    return Refusal(code, f"+{digits[:length]}… is a {what} destination range")
        if self.any_country:
            return None
        region = _region(number)
        if region not in self.countries:
            where = (
                "a non-geographic (satellite or international) network"
                if region in ("", NON_GEOGRAPHIC)
                else region
            )
            allowed = ", ".join(sorted(self.countries))
            return Refusal(
                COUNTRY_NOT_ALLOWED, f"destination country {where} is not allowed (allowed: {allowed})"
            )
        return None


def destination_refusals(tenant: Tenant, numbers: Iterable[str]) -> dict[str, Refusal]:
    """Of E.164 numbers, the ones this tenant may not send to, each with why. Guards off
    (SMSGW_GUARDS=0): none."""
    if not settings.GUARDS_ENABLED:
        return {}
    checker = _Checker(tenant)
    out = {}
    for number in dict.fromkeys(numbers):
        refusal = checker.refusal(number)
        if refusal is not None:
            out[number] = refusal
    return out


def destination_refusal(tenant: Tenant, number: str) -> Refusal | None:
    return destination_refusals(tenant, [number]).get(number)
