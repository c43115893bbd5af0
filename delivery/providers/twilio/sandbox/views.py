"""The read side of the sandbox's store (``SandboxViews``, mixed into ``SandboxState``): a message's
resource as Twilio renders it, its internals for ``GET /_sandbox/messages/{sid}``, the rows of
``GET /_sandbox/submissions`` and the Messages list (``query``): one page and the tokens of the pages
after and before it, cut from a snapshot. Must not import Django.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

from delivery.providers.twilio.sandbox.config import API_VERSION, SUBMISSIONS_CHUNK
from delivery.providers.twilio.sandbox.lifecycle import ERROR_MESSAGES, INF, SandboxMessage, price, rfc2822
from delivery.providers.twilio.sandbox.paging import _created, _page_token, _parse_page_token, _rank


class SandboxViews:
    """The renders and the list of ``SandboxState``, which it is mixed into: they read its ``clock``,
    ``config``, ``all`` and ``by_to`` / ``by_from`` indexes, ``_next_seq`` and the ``_dates`` / ``_lists``
    caches."""

    # -- views --------------------------------------------------------------------------------------
    def _date(self, ts: int) -> str:
        text = self._dates.get(ts)
        if text is None:
            if len(self._dates) > 4096:
                self._dates.clear()
            text = self._dates[ts] = rfc2822(ts)
        return text

    def render(self, m: SandboxMessage, now: float | None = None, *, initial: bool = False) -> dict:
        """The resource at ``now`` (default: the clock), or as created (the create answer)."""
        if initial:  # Twilio answers a create with the initial status, whatever happened since
            status, since = m.initial_status, m.created
            from_ = m.sender if m.from_given else None
            sent, final = None, False
        else:
            if now is None:
                now = self.clock()
            status, since = m.status_at(now)
            from_ = m.from_at(now)
            sent = m.sent_second(now)
            final = now >= m.end_at
        error = m.error_code if final else None
        base = f"{self.messages_path}/{m.sid}"
        return {
            "account_sid": self.account_sid,
            "api_version": API_VERSION,
            "body": m.body,
            "date_created": self._date(m.created_ts),
            "date_sent": None if sent is None else self._date(sent),
            "date_updated": self._date(int(since)),
            "direction": "outbound-api",
            "error_code": error,
            "error_message": None if error is None else ERROR_MESSAGES[error],
            "from": from_,
            "messaging_service_sid": self._service_sid_of(m),
            "num_media": "0",
            "num_segments": "0" if from_ is None else str(m.num_segments),
            "price": None if sent is None else price(m.num_segments),
            "price_unit": "USD",
            "sid": m.sid,
            "status": status,
            "subresource_uris": {"media": f"{base}/Media.json", "feedback": f"{base}/Feedback.json"},
            "to": m.to,
            "uri": f"{base}.json",
        }

    def _service_sid_of(self, m: SandboxMessage) -> str | None:
        """The given MessagingServiceSid; for a send without one, the account's default service. Twilio's
        Message resource: messaging_service_sid "The SID of the Messaging Service associated with the
        Message resource. A unique default value is assigned if a Messaging Service is not used"
        (twilio-oai spec/json/twilio_api_v2010.json, api.v2010.account.message); since April 2024 "POST
        request will return the messaging_service_sid parameter with a default value for messages which
        did not specify one ... unique for each account_sid" (twilio.com/en-us/changelog,
        "Messaging API response & Logs with default messaging service"; help.twilio.com/articles/
        23584481873307). The status callbacks keep MessagingServiceSid for given services only: Twilio's
        sources say nothing of the default service there."""
        if m.messaging_service_sid:
            return m.messaging_service_sid
        return self.default_service_sid if self.config.default_messaging_service else None

    def debug(self, m: SandboxMessage) -> dict:
        """``GET /_sandbox/messages/{sid}``: what the client sent and the lifecycle fixed at create."""
        form: dict[str, Any] = {}
        for key, value in parse_qsl(m.raw_form.decode("utf-8", "replace"), keep_blank_values=True):
            if key in form:
                form[key] = [*form[key], value] if isinstance(form[key], list) else [form[key], value]
            else:
                form[key] = value
        now = self.clock()

        def instant(t: float | None) -> float | None:
            return None if t is None or t == INF else t

        return {
            "sid": m.sid,
            "seq": m.seq,
            "form": form,
            "status_callback": m.status_callback or None,
            "validity_period": m.validity_period,
            "status": m.status_at(now)[0],
            "initial_status": m.initial_status,
            "sender": m.sender,
            "num_segments": m.num_segments,
            "created_at": m.created,
            "assigned_at": instant(m.assign_at),
            "release_at": instant(m.release_at),
            "sent_at": m.release_at if m.sent else None,
            "final_at": m.end_at,
            "final_status": m.final_status,
            "error_code": m.error_code,
            "timeline": [{"status": status, "at": at} for status, at in m.timeline()],
            "callbacks": m.has_callbacks,
            "now": now,
        }

    def submission_chunks(self, since: float, chunk: int = SUBMISSIONS_CHUNK) -> Iterator[bytes]:
        """``GET /_sandbox/submissions``: the JSON list ``[[created, sender, segments, to], ...]`` of the
        stored messages created at or after ``since`` (unix seconds), oldest first, in pieces of ``chunk``
        rows. The messages are those stored when the first piece is taken (``created`` never decreases
        along ``all``, so the start is a bisection)."""
        messages = self.all
        start = bisect_left(messages, since, key=_created)
        stop = len(messages)
        yield b"["
        dumps = json.dumps
        for i in range(start, stop, chunk):
            rows = [(m.created, m.sender, m.num_segments, m.to) for m in messages[i : min(i + chunk, stop)]]
            text = dumps(rows, separators=(",", ":"))[1:-1]
            yield (text if i == start else "," + text).encode()
        yield b"]"

    # -- list ---------------------------------------------------------------------------------------
    def query(
        self,
        *,
        to: str | None,
        from_: str | None,
        lo: int | None,
        hi: int | None,
        page: int,
        page_size: int,
        token: str | None,
    ) -> tuple[list[SandboxMessage], str | None, str | None]:
        """One page and the tokens of the pages after and before it (None at an end).

        The first page fixes a snapshot (an instant and the messages created by then); its tokens carry
        it, so every later page is cut from the same order and filters: no duplicates or gaps while
        statuses move on between requests, and messages created since never show up mid-listing."""
        if token:
            before, snapshot_us, upto, anchor = _parse_page_token(token)
        else:
            before, snapshot_us, upto, anchor = False, int(self.clock() * 1e6), self._next_seq, None
        ordered = self._ordered(to, from_, lo, hi, snapshot_us, upto)
        now = snapshot_us / 1e6

        def rank(m: SandboxMessage) -> tuple[int, int, int]:
            return _rank(now, m)

        if anchor is None:
            start = page * page_size
            stop = start + page_size
        elif before:
            stop = bisect_left(ordered, anchor, key=rank)
            start = max(0, stop - page_size)
        else:
            start = bisect_right(ordered, anchor, key=rank)
            stop = start + page_size
        items = ordered[start:stop]
        next_token = prev_token = None
        if items and stop < len(ordered):
            next_token = _page_token("PA", snapshot_us, upto, rank(items[-1]))
        if items and start > 0:
            prev_token = _page_token("PB", snapshot_us, upto, rank(items[0]))
        return items, next_token, prev_token

    def _ordered(
        self, to: str | None, from_: str | None, lo: int | None, hi: int | None, snapshot_us: int, upto: int
    ) -> list[SandboxMessage]:
        """The matching messages among the first ``upto``, in list order, as of the snapshot. O(bucket):
        candidates come from the To or From index (the smaller when both are given); kept for the
        following pages of the same listing."""
        lag = self.config.list_lag_seconds
        key = (to, from_, lo, hi, snapshot_us, upto, lag)
        cached = self._lists.get(key)
        if cached is not None:
            self._lists.move_to_end(key)
            return cached
        if to is not None and from_ is not None:
            by_to, by_from = self.by_to.get(to, []), self.by_from.get(from_, [])
            candidates = by_to if len(by_to) <= len(by_from) else by_from
        elif to is not None:
            candidates = self.by_to.get(to, [])
        elif from_ is not None:
            candidates = self.by_from.get(from_, [])
        else:
            candidates = self.all
        now = snapshot_us / 1e6
        # list_lag_seconds: a message younger than the lag is not listed yet. Twilio documents no freshness
        # for the Messages list; its users report minutes (twilio/twilio-java#442) to hours
        # (twilio/twilio-node#647) before a sent message shows up in it.
        newest = now - lag if lag > 0 else math.inf
        dated = lo is not None or hi is not None
        out = []
        for m in candidates:  # in seq order, hence in created order
            if m.seq >= upto or m.created > newest:
                break
            if to is not None and m.to != to:
                continue
            if from_ is not None and (m.sender != from_ or m.from_at(now) is None):
                continue  # From matches the current from: not a service send still without a sender
            if dated:
                second = m.sent_second(now)  # a message not sent yet matches no DateSent filter
                if second is None or (lo is not None and second < lo) or (hi is not None and second > hi):
                    continue
            out.append(m)
        out.sort(key=lambda m: _rank(now, m))
        self._lists[key] = out
        if len(self._lists) > 8:
            self._lists.popitem(last=False)
        return out
