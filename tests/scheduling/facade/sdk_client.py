"""The official Twilio Python SDK pointed at smsgw: over real HTTP (``sdk_client``, what a user writes,
docs/coming-from-twilio.md) or, for the fast tests, through Django's test client (``sdk_in_process``), so
the SDK's own requests (form bodies, Basic auth, paging URIs) reach the views unchanged."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from django.test import Client as DjangoClient
from twilio.http.http_client import TwilioHttpClient
from twilio.http.response import Response
from twilio.rest import Client

TWILIO_API = "https://api.twilio.com"


class BaseUrlHttpClient(TwilioHttpClient):
    """The few lines a user adds (docs/coming-from-twilio.md): requests for api.twilio.com go to smsgw."""

    def __init__(self, base_url: str, **kwargs):
        super().__init__(**kwargs)
        self.base_url = base_url.rstrip("/")

    def request(self, method, url, *args, **kwargs):
        if url.startswith(TWILIO_API):
            url = self.base_url + url[len(TWILIO_API) :]
        return super().request(method, url, *args, **kwargs)


def sdk_client(base_url: str, username: str, password: str, account_sid: str | None = None) -> Client:
    return Client(username, password, account_sid, http_client=BaseUrlHttpClient(base_url))


class DjangoTestHttpClient(TwilioHttpClient):
    """The SDK's requests answered by Django's test client, in this process and transaction."""

    def __init__(self):
        super().__init__()
        self.django = DjangoClient()

    def request(
        self,
        method,
        url,
        params=None,
        data=None,
        headers=None,
        auth=None,
        timeout=None,
        allow_redirects=False,
    ):
        import base64

        path = urlsplit(url).path
        query = urlsplit(url).query
        if params:
            query = "&".join(q for q in (query, urlencode(params, doseq=True)) if q)
        extra = {}
        if auth:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            extra["HTTP_AUTHORIZATION"] = f"Basic {token}"
        target = f"{path}?{query}" if query else path
        if method == "GET":
            resp = self.django.get(target, **extra)
        elif method == "DELETE":
            resp = self.django.delete(target, **extra)
        else:
            resp = self.django.post(
                target,
                urlencode(data or {}, doseq=True),
                content_type="application/x-www-form-urlencoded",
                **extra,
            )
        self.last_response = Response(resp.status_code, resp.content.decode(), dict(resp.headers))
        return self.last_response


def sdk_in_process(username: str, password: str, account_sid: str | None = None) -> Client:
    return Client(username, password, account_sid, http_client=DjangoTestHttpClient())
