"""Which keyword an inbound message is, and what it asks for (docs/inbound.md, "Keywords").

A keyword is the whole message: one word, trimmed, case-insensitive, a trailing full stop or exclamation
mark ignored ("Stop!" is STOP). A message whose first word is an opt-out keyword but that says more
("stop please", "Stop texting me") is a near miss: flagged for the tenant's review, never applied (an
opt-out is a legal act; guessing it from a sentence either ignores one or invents one). Only an opt-out:
"Yes, see you Tuesday" or "C u later" is an ordinary reply, and flagging every sentence that starts
like an opt-in, a help word or a tenant's one-letter keyword would bury the near misses that matter.

The built-in lists follow the carriers' and providers' defaults (Twilio's default opt-out keywords:
help.twilio.com/articles/223134027; the CTIA's STOP/HELP; the French ARRET/AIDE and Spanish
ALTO/PARAR/AYUDA that bilingual senders are asked to honour). A tenant's own rule (inbound.models
.KeywordRule, for one receiving number or all of them) wins over the lists, so a tenant can make CANCEL
cancel its pending reminders instead of opting out.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from inbound.models import KeywordAction, KeywordRule

OPT_OUT = frozenset(
    {"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "OPTOUT", "REVOKE"}  # Twilio, CTIA
    | {"ARRET", "ARRETER", "DESABONNER"}  # French
    | {"ALTO", "PARAR", "BAJA", "CANCELAR"}  # Spanish
    | {"STOPP", "ABMELDEN"}  # German
)
OPT_IN = frozenset({"START", "UNSTOP", "YES", "SUBSCRIBE", "DEMARRER", "ALTA", "INICIAR"})
HELP = frozenset({"HELP", "INFO", "AIDE", "AYUDA", "HILFE"})
BUILT_IN = {
    **dict.fromkeys(OPT_OUT, KeywordAction.OPT_OUT),
    **dict.fromkeys(OPT_IN, KeywordAction.OPT_IN),
    **dict.fromkeys(HELP, KeywordAction.HELP),
}
MAX_KEYWORD = 32  # longer is no keyword (KeywordRule.keyword's length)


@dataclass(frozen=True)
class Match:
    keyword: str  # the first word, normalised ("" for an empty message)
    action: str = ""  # what it asks for; "" when nothing
    reply: str = ""  # the tenant rule's reply text ("" for the built-in defaults)
    near_miss: bool = False  # the first word is a keyword but the message says more


def _normal(word: str) -> str:
    # Upper case without accents (ARRÊT is ARRET), a trailing "." or "!" dropped.
    decomposed = unicodedata.normalize("NFKD", word.strip().rstrip(".!").upper())
    return "".join(c for c in decomposed if not unicodedata.combining(c))[:MAX_KEYWORD]


def first_word(body: str) -> str:
    words = (body or "").split(maxsplit=1)
    return _normal(words[0]) if words else ""


def keyword_match(*, body: str, tenant_id: int | None, numbers: tuple[str, ...]) -> Match:
    """The message's keyword and action. ``numbers``: the receiving number and its pool, for the tenant's
    rules of one number; a rule for one number wins over the tenant's rule for all."""
    words = (body or "").split()
    keyword = _normal(words[0]) if words else ""
    if not keyword:
        return Match(keyword="")
    action, reply = BUILT_IN.get(keyword, ""), ""
    if tenant_id is not None:
        rules = KeywordRule.objects.filter(
            tenant_id=tenant_id, keyword=keyword, number__in=["", *[n for n in numbers if n]]
        ).values_list("number", "action", "reply")
        # The most specific: a rule naming the number beats the tenant-wide one.
        for _number, rule_action, rule_reply in sorted(rules, key=lambda r: r[0] == ""):
            action, reply = rule_action, rule_reply
            break
    if not action:
        return Match(keyword=keyword)
    if len(words) > 1:
        return Match(keyword=keyword, near_miss=action == KeywordAction.OPT_OUT)
    return Match(keyword=keyword, action=action, reply=reply)
