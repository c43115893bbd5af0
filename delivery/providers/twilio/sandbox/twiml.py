"""The messaging TwiML an incoming-message webhook answers with, as far as the sandbox executes it: the
``<Message>`` verbs (twilio.com/docs/messaging/twiml/message). Must not import Django.

* The answer's body is TwiML, ``<Response>`` at its root; an empty body (or an empty ``<Response/>``)
  asks for nothing. One Twilio cannot parse is its error 12100 "Document parse failure"
  (twilio.com/docs/api/errors/12100); a verb other than Message, Redirect or Sms is warning 14110
  "Invalid Verb for Message Reply" (twilio.com/docs/api/errors/14110), skipped.
* ``<Message>``: its text, or the text of its ``<Body>`` noun; ``to`` ("If no 'to' attribute is
  provided, Twilio sends the message as a reply to the current sender"), ``from`` (default the number
  the message came in on), ``action`` (the created message's status callback URL; ``statusCallback``
  the deprecated name of it).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

PARSE_FAILURE, INVALID_VERB = 12100, 14110


class TwimlError(ValueError):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Reply:
    """One ``<Message>``: ``to`` / ``from_`` empty when the verb leaves them to the defaults."""

    body: str
    to: str = ""
    from_: str = ""
    status_callback: str = ""


def messages(answer: str) -> tuple[list[Reply], list[int]]:
    """The ``<Message>`` verbs of an answer, in order, and the warning codes of verbs skipped; raises
    TwimlError for an answer that is not TwiML."""
    if not answer.strip():
        return [], []
    try:
        root = ET.fromstring(answer)  # noqa: S314 - the sandbox's own receiver, not the internet
    except ET.ParseError as exc:
        raise TwimlError(PARSE_FAILURE, f"Document parse failure: {exc}") from None
    if root.tag != "Response":
        raise TwimlError(PARSE_FAILURE, "Document parse failure: the root element must be <Response>")
    replies: list[Reply] = []
    warnings: list[int] = []
    for verb in root:
        if verb.tag != "Message":
            if verb.tag not in ("Redirect", "Sms"):
                warnings.append(INVALID_VERB)
            continue  # <Redirect> fetches more TwiML: not followed by the sandbox
        body_noun = verb.find("Body")
        text = body_noun.text if body_noun is not None else verb.text
        replies.append(
            Reply(
                body=(text or "").strip(),
                to=verb.get("to", "").strip(),
                from_=verb.get("from", "").strip(),
                status_callback=(verb.get("action") or verb.get("statusCallback") or "").strip(),
            )
        )
    return replies, warnings
