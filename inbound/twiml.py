"""A Twilio program's answer to a forwarded incoming message, read as Twilio reads Messaging TwiML
(twilio.com/docs/messaging/twiml, /twiml/message): a ``<Response>`` root holding ``<Message>`` verbs, each
with its text directly inside or in ``<Body>`` nouns, and optional ``to`` and ``from`` attributes (the
contact and the number written to, by default). Several ``<Message>`` verbs are several replies.

smsgw sends SMS text only: ``<Media>``, ``<Redirect>``, a ``<Message>``'s ``action``/``method`` and any other
verb are left out, each with a note. The answer is the tenant program's, untrusted: it is at most
``SMSGW_WEBHOOK_MAX_RESPONSE_BYTES`` long (receipts.webhooks reads no more), read by expat with no
document type (so no entity of the program's own: no billion laughs, no external entity), at most
``MAX_ELEMENTS`` elements deep and wide, so every input costs bounded work. Anything else is ``Malformed``,
recorded on the delivery, never raised further."""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.parsers import expat

MAX_ELEMENTS = 200
MAX_DEPTH = 8
# Twilio sends at most this many <Message>s for one answer in smsgw (a runaway program's answer stays cheap).
MAX_REPLIES = 10


class Malformed(ValueError):
    pass


@dataclass(frozen=True)
class Reply:
    body: str
    to: str = ""  # empty: the contact who wrote
    from_: str = ""  # empty: the number written to


@dataclass
class Twiml:
    replies: list[Reply] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # what was left out ("Redirect", "Media", ...)


@dataclass
class _Node:
    tag: str
    attrs: dict[str, str]
    text: list[str] = field(default_factory=list)
    children: list[_Node] = field(default_factory=list)


def _tree(answer: bytes) -> _Node:
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[_Node] = []
    root: list[_Node] = []
    count = 0

    def refuse_doctype(*_args) -> None:
        raise Malformed("a document type declaration is not taken")

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal count
        count += 1
        if count > MAX_ELEMENTS or len(stack) >= MAX_DEPTH:
            raise Malformed(f"more than {MAX_ELEMENTS} elements or {MAX_DEPTH} levels")
        node = _Node(tag, attrs)
        (stack[-1].children if stack else root).append(node)
        stack.append(node)

    def end(_tag: str) -> None:
        stack.pop()

    def text(data: str) -> None:
        if stack:
            stack[-1].text.append(data)

    parser.StartDoctypeDeclHandler = refuse_doctype
    parser.EntityDeclHandler = refuse_doctype
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    try:
        parser.Parse(answer, True)
    except expat.ExpatError as exc:
        raise Malformed(
            f"not XML ({expat.errors.messages.get(exc.code, 'error')}, line {exc.lineno})"
        ) from None
    return root[0]


def _message(node: _Node, out: Twiml) -> None:
    bodies = [c for c in node.children if c.tag == "Body"]
    text = "".join(t for b in bodies for t in b.text) if bodies else "".join(node.text)
    out.ignored += [c.tag for c in node.children if c.tag != "Body"]
    out.ignored += [f"Message@{a}" for a in sorted(node.attrs) if a not in ("to", "from")]
    body = text.strip()
    if not body:
        out.ignored.append("Message (empty)")
        return
    if len(out.replies) >= MAX_REPLIES:
        out.ignored.append("Message (over the limit)")
        return
    out.replies.append(
        Reply(body=body, to=node.attrs.get("to", "").strip(), from_=node.attrs.get("from", "").strip())
    )


def twiml_parse(answer: bytes) -> Twiml:
    """The replies an answer asks for. An empty answer asks for none; raises Malformed for anything that
    is not a ``<Response>`` document."""
    out = Twiml()
    if not answer.strip():
        return out
    root = _tree(answer)
    if root.tag != "Response":
        raise Malformed(f"the root element is <{root.tag[:32]}>, not <Response>")
    for node in root.children:
        if node.tag == "Message":
            _message(node, out)
        else:
            out.ignored.append(node.tag[:32])
    return out
