"""A keyword's answer (docs/inbound.md, "Keywords and actions"): the text sent back to the contact, from the
number (or pool) the keyword was sent to, as an ordinary message of the tenant (its timeline, receipts,
webhooks), born in the transaction that processes the inbound message.

The text is the tenant rule's reply; without one, opt-out, opt-in and help have a default in the
language of the keyword matched (ARRET is answered in French, ALTO in Spanish); cancel and confirm
without a rule's reply are not answered, nor is an opt-in that changed nothing (a "Yes" from a contact
who never opted out).

The confirmation of an opt-out goes to a recipient the suppression list now covers for this very sender:
it is the one message marked ``exempt_suppression`` (scheduling.models.Message), so acceptance is not
asked and the send batch's screening lets it through (Rock #7049: the STOP confirmation was suppressed by
the opt-out it confirms). It is sent now, whatever the tenant's quiet hours: the contact just wrote.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.utils import timezone

from inbound.models import InboundMessage, KeywordAction
from scheduling.facade.names import SENDER_POOL_FIELD
from scheduling.messages import service
from scheduling.models import Priority
from smsgw.domain_errors import DomainError
from smsgw.models import Tenant

log = logging.getLogger(__name__)

ACTOR = "keyword"

# The language of each built-in keyword that is not English (inbound.keywords' lists).
LANGUAGE = {
    **dict.fromkeys(("ARRET", "ARRETER", "DESABONNER", "DEMARRER", "AIDE"), "fr"),
    **dict.fromkeys(("ALTO", "PARAR", "BAJA", "CANCELAR", "ALTA", "INICIAR", "AYUDA"), "es"),
    **dict.fromkeys(("STOPP", "ABMELDEN", "HILFE"), "de"),
}

# The defaults, per action and language; {name} is the tenant's name. Short enough for one GSM-7 segment
# in English (the CTIA asks for the program's name, that no more messages will come, and how to return).
DEFAULTS: dict[str, dict[str, str]] = {
    KeywordAction.OPT_OUT: {
        "en": "{name}: you are unsubscribed and will get no more messages from this number. "
        "Reply START to subscribe again.",
        "fr": "{name} : vous êtes désinscrit et ne recevrez plus de messages de ce numéro. "
        "Répondez DEMARRER pour vous réinscrire.",
        "es": "{name}: se ha dado de baja y no recibirá más mensajes de este número. "
        "Responda ALTA para volver a suscribirse.",
        "de": "{name}: Sie sind abgemeldet und erhalten keine Nachrichten mehr von dieser Nummer. "
        "Antworten Sie START, um sich wieder anzumelden.",
    },
    KeywordAction.OPT_IN: {
        "en": "{name}: you are subscribed again. Reply STOP to unsubscribe, HELP for help.",
        "fr": "{name} : vous êtes de nouveau inscrit. Répondez ARRET pour vous désinscrire, AIDE pour "
        "de l'aide.",
        "es": "{name}: está suscrito de nuevo. Responda BAJA para darse de baja, AYUDA para ayuda.",
        "de": "{name}: Sie sind wieder angemeldet. Antworten Sie STOPP zum Abmelden, HILFE für Hilfe.",
    },
    KeywordAction.HELP: {
        "en": "{name}: reply STOP to unsubscribe. Message and data rates may apply.",
        "fr": "{name} : répondez ARRET pour vous désinscrire. Des frais de messagerie peuvent s'appliquer.",
        "es": "{name}: responda BAJA para darse de baja. Pueden aplicarse tarifas de mensajes y datos.",
        "de": "{name}: Antworten Sie STOPP zum Abmelden. Es können SMS-Gebühren anfallen.",
    },
}
# What a confirmation may be sent past: the suppression it confirms (opt-out), or one it answers while
# still in place (HELP from a recipient who opted out; START whose entry is kept for another sender).
EXEMPT = frozenset({KeywordAction.OPT_OUT, KeywordAction.OPT_IN, KeywordAction.HELP})


def reply_text(*, action: str, keyword: str, rule_reply: str, tenant: Tenant) -> str:
    """The rule's reply, else the default for the action in the keyword's language; "" for none."""
    if rule_reply:
        return rule_reply
    texts = DEFAULTS.get(action)
    if not texts:
        return ""
    return texts[LANGUAGE.get(keyword, "en")].format(name=tenant.name or tenant.slug)


def reply_send(
    inbound: InboundMessage, *, action: str, keyword: str, rule_reply: str, default: bool = True
) -> dict:
    """Send the keyword's answer to the contact; returns what to add to the action's result:
    ``{"reply": <message id>}``, ``{"reply_error": ...}`` when it could not be made (the action stands),
    or nothing when there is no text (``default`` False: only a rule's own text is sent)."""
    if not rule_reply and not default:
        return {}
    assert inbound.tenant_id is not None  # routed: only a tenant's message has a keyword applied
    tenant = Tenant.objects.get(pk=inbound.tenant_id)
    text = reply_text(action=action, keyword=keyword, rule_reply=rule_reply, tenant=tenant)
    if not text:
        return {}
    sender = {SENDER_POOL_FIELD: inbound.sender_pool} if inbound.sender_pool else {"from": inbound.to_number}
    data = {
        "to": inbound.from_number,
        "body": text,
        **sender,
        "priority": Priority.TRANSACTIONAL,
        "quiet_hours": {"enabled": False},
        "metadata": {"inbound": inbound.public_id, "keyword": keyword},
    }
    exempt = action in EXEMPT
    try:
        # A savepoint: a reply refused (quota, destination, a sender the tenant no longer owns) rolls
        # back alone and the action it answers stands.
        with transaction.atomic():
            message, _ = service.message_build(
                tenant=tenant,
                data=data,
                idempotency_key=None,
                fingerprint=service.fingerprint_of(data),
                now=timezone.now(),
                checks=False,
            )
            service.destination_allowed(tenant, message.to)
            if not exempt:
                service._not_suppressed(tenant, message.to, message.from_number, message.sender_pool)
            message.exempt_suppression = exempt
            service.message_born(tenant=tenant, actor=ACTOR, message=message, resolved=None)
    except DomainError as exc:
        log.warning("inbound %s: the %s reply was not sent (%s)", inbound.public_id, action, exc)
        return {"reply_error": str(exc)[:200]}
    return {"reply": message.public_id}
