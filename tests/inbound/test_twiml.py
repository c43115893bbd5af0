"""Reading a Twilio program's TwiML answer (inbound.twiml, twilio.com/docs/messaging/twiml/message): the
<Message> verbs in order, their text or <Body> nouns and to/from attributes; what smsgw does not send is
left out by name; anything else is Malformed, with bounded work for every input."""

from __future__ import annotations

import time

import pytest

from inbound.twiml import MAX_REPLIES, Malformed, Reply, twiml_parse


def test_messages_in_order_with_body_nouns_and_attributes():
    answer = (
        b'<?xml version="1.0" encoding="UTF-8"?>\n<Response>\n'
        b"  <Message>  Hello &amp; welcome  </Message>\n"
        b'  <Message to="+14155550199" from="+14155550100"><Body>Two</Body><Media>https://x.io/a.jpg</Media>'
        b"</Message>\n"
        b"  <Redirect>/next</Redirect>\n"
        b'  <Message action="/s" method="POST"></Message>\n'
        b"</Response>"
    )
    parsed = twiml_parse(answer)
    assert parsed.replies == [
        Reply(body="Hello & welcome"),
        Reply(body="Two", to="+14155550199", from_="+14155550100"),
    ]
    assert sorted(parsed.ignored) == [
        "Media",
        "Message (empty)",
        "Message@action",
        "Message@method",
        "Redirect",
    ]


@pytest.mark.parametrize("answer", [b"", b"  \n", b"<Response/>", b"<Response></Response>"])
def test_an_empty_answer_asks_for_nothing(answer):
    assert twiml_parse(answer).replies == []


def test_at_most_max_replies():
    parsed = twiml_parse(b"<Response>" + b"<Message>x</Message>" * (MAX_REPLIES + 3) + b"</Response>")
    assert len(parsed.replies) == MAX_REPLIES and parsed.ignored.count("Message (over the limit)") == 3


@pytest.mark.parametrize(
    "answer",
    [
        b"<Response><Message>unclosed",
        b"plain text",
        b"<Html/>",
        b"<Response><Message>x</Message></Response><Response/>",
        b'<!DOCTYPE r [<!ENTITY a "x">]><Response><Message>&a;</Message></Response>',
        b'<!DOCTYPE r SYSTEM "file:///etc/passwd"><Response/>',
        b"<Response><Message>&undefined;</Message></Response>",
        b"<a>" * 20 + b"</a>" * 20,
        b"\xff\xfe<",
    ],
)
def test_anything_else_is_malformed(answer):
    with pytest.raises(Malformed):
        twiml_parse(answer)


def test_a_billion_laughs_costs_nothing():
    lol = b'<!DOCTYPE lolz [<!ENTITY lol "lol">' + b"".join(
        b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;") * 10)
        for i in range(1, 10)
    )
    started = time.perf_counter()
    with pytest.raises(Malformed):
        twiml_parse(lol + b"]><Response><Message>&lol9;</Message></Response>")
    assert time.perf_counter() - started < 0.5
