"""The Vonage sandbox (delivery.providers.vonage.sandbox): a real HTTPS process that the official ``vonage`` SDK sends through
unchanged, by ``rest_host`` and the sandbox's CA. Vonage's answer shape, one entry and one message-id per
part, every error status as Vonage answers it (HTTP 200, status != "0", nothing stored), the HTTP faults,
the outage modes and the per-recipient rules."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest
import requests
from vonage_http_client.errors import HttpRequestError, ServerError
from vonage_sms import SmsError, SmsMessage, SmsResponse

from delivery.providers.vonage.sandbox.parts import split_parts
from delivery.providers.vonage.sandbox.process import VonageSandboxProcess
from delivery.providers.vonage.tests.helpers import sdk

GB = "447700900000"


@pytest.fixture(scope="module")
def vonage():
    with VonageSandboxProcess(control_port=0) as process:
        yield process


@pytest.fixture(autouse=True)
def fresh(vonage):
    vonage.reset()
    yield


def send(vonage, text: str = "Your code is 123456", to: str = GB, **kwargs) -> SmsResponse:
    return sdk(vonage).sms.send(SmsMessage(to=to, from_=kwargs.pop("from_", "Acme"), text=text, **kwargs))


def refused(vonage, status: int, **kwargs) -> None:
    with pytest.raises(SmsError, match=f"error code {status}:"):
        send(vonage, **kwargs)
    stats = vonage.stats()
    assert stats["parts"] == 0 and stats["submissions"] == 0  # nothing stored
    assert stats["rejections"] == {str(status): 1}


def test_the_banner_names_an_https_port_and_the_ca_file(vonage):
    assert vonage.banner.startswith("vonage sandbox listening on https://127.0.0.1:")
    assert vonage.rest_host.startswith("127.0.0.1:")
    with open(vonage.ca_file) as f:
        assert "BEGIN CERTIFICATE" in f.read()
    # an untrusting client cannot connect: the certificate is the sandbox's own
    with pytest.raises(requests.exceptions.SSLError):
        requests.post(f"https://{vonage.rest_host}/sms/json", data={}, timeout=5, verify=True)


def test_the_official_sdk_sends_one_part(vonage):
    response = send(vonage, client_ref="msg-1")
    assert response.message_count == "1"
    (entry,) = response.messages
    assert entry.status == "0" and entry.to == GB and entry.client_ref == "msg-1"
    assert len(entry.message_id) == 16 and entry.network == "23410"
    assert entry.message_price == "0.03330000" and entry.remaining_balance == "999.96670000"
    (stored,) = vonage.messages()
    assert stored["message-id"] == entry.message_id and stored["client-ref"] == "msg-1"
    assert stored["form"]["from"] == "Acme" and "api_secret" not in stored["form"]


def test_a_three_part_message_answers_three_ids_with_a_falling_balance(vonage):
    text = "".join(str(i % 10) for i in range(153 * 2 + 10))  # 316 GSM characters: 3 parts
    response = send(vonage, text, client_ref="long-1")
    assert response.message_count == "3"
    ids = [m.message_id for m in response.messages]
    assert len(set(ids)) == 3
    assert [m.remaining_balance for m in response.messages] == [
        "999.96670000",
        "999.93340000",
        "999.90010000",
    ]
    assert {m.client_ref for m in response.messages} == {"long-1"}
    parts = vonage.messages(client_ref="long-1")
    assert [p["message-id"] for p in parts] == ids
    assert [p["part"] for p in parts] == [1, 2, 3] and {p["parts"] for p in parts} == {3}
    assert len({p["request_id"] for p in parts}) == 1
    assert "".join(p["text"] for p in parts) == text
    assert [len(p["text"]) for p in parts] == [153, 153, 10]
    assert vonage.stats()["submissions"] == 1 and vonage.stats()["parts"] == 3


def test_unicode_messages_split_at_70_and_67(vonage):
    assert send(vonage, "é" * 70, type="unicode").message_count == "1"
    assert send(vonage, "ж" * 71, type="unicode").message_count == "2"
    assert send(vonage, "ж" * (67 * 2 + 1), type="unicode").message_count == "3"
    assert {p["type"] for p in vonage.messages()} == {"unicode"}


@pytest.mark.parametrize(
    ("text", "unicode", "sizes"),
    [
        ("a" * 160, False, [160]),
        ("a" * 161, False, [153, 8]),
        ("a" * 306, False, [153, 153]),
        ("a" * 307, False, [153, 153, 1]),
        ("€" * 80, False, [80]),  # extension characters take two septets: 160
        ("€" * 81, False, [76, 5]),  # 153 septets hold 76 of them, never half of one
        ("ж" * 70, True, [70]),
        ("ж" * 135, True, [67, 67, 1]),
        ("😀" * 35, True, [35]),  # a surrogate pair is two units: 70
        ("😀" * 34 + "ж" * 3, True, [33, 4]),  # a pair never split: 67 units hold 33 pairs
    ],
)
def test_parts_are_cut_as_vonage_counts_them(text, unicode, sizes):
    parts = split_parts(text, unicode)
    assert [len(p) for p in parts] == sizes and "".join(parts) == text


def test_the_ca_bundle_from_the_environment_works_too(vonage, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", vonage.ca_file)
    client = sdk(vonage)
    client.http_client._session.trust_env = True
    client.http_client._session.verify = True
    assert client.sms.send(SmsMessage(to=GB, from_="Acme", text="hi")).messages[0].status == "0"


def test_a_json_body_and_credentials_in_the_body_are_accepted(vonage):
    answer = requests.post(
        f"https://{vonage.rest_host}/sms/json",
        json={
            "api_key": vonage.api_key,
            "api_secret": vonage.api_secret,
            "to": GB,
            "from": "Acme",
            "text": "hi",
        },
        verify=vonage.ca_file,
        timeout=10,
    )
    assert answer.status_code == 200 and answer.json()["messages"][0]["status"] == "0"
    form = requests.post(
        f"https://{vonage.rest_host}/sms/json",
        data={"api_key": vonage.api_key, "api_secret": "wrong", "to": GB, "from": "Acme", "text": "hi"},
        verify=vonage.ca_file,
        timeout=10,
    )
    assert form.status_code == 200
    assert form.json() == {
        "message-count": "1",
        "messages": [{"to": GB, "status": "4", "error-text": "Bad Credentials"}],
    }


def test_wrong_credentials_answer_status_4(vonage):
    with pytest.raises(SmsError, match="error code 4: Bad Credentials"):
        sdk(vonage, api_key=vonage.api_key, api_secret="wrong").sms.send(
            SmsMessage(to=GB, from_="Acme", text="x")
        )
    assert vonage.stats()["parts"] == 0


def test_missing_and_invalid_parameters(vonage):
    base = {
        "api_key": vonage.api_key,
        "api_secret": vonage.api_secret,
        "to": GB,
        "from": "Acme",
        "text": "hi",
    }

    def status(**changes) -> str:
        data = {k: v for k, v in {**base, **changes}.items() if v is not None}
        answer = requests.post(
            f"https://{vonage.rest_host}/sms/json", data=data, verify=vonage.ca_file, timeout=10
        )
        return answer.json()["messages"][0]["status"]

    assert status(api_key=None, api_secret=None) == "2"
    assert status(text=None) == "2"
    assert status(to=None) == "2"
    assert status(to="12ab") == "3"
    assert status(**{"from": "ThisIsTooLong"}) == "15"
    assert status(ttl="100") == "16"
    assert status(callback="example.com/dlr") == "23"
    assert status(**{"message-class": "7"}) == "20"
    assert vonage.stats()["parts"] == 0


@pytest.mark.parametrize(
    ("key", "status"),
    [
        ("throttled_rate", 1),
        ("internal_error_rate", 5),
        ("invalid_credentials_rate", 4),
        ("insufficient_credit_rate", 9),
    ],
)
def test_status_rates(vonage, key, status):
    vonage.config(**{key: 1.0})
    refused(vonage, status)


def test_account_switches_and_recipient_lists(vonage):
    vonage.config(auth_fail=True)
    refused(vonage, 4)
    vonage.reset()
    vonage.config(account_barred=True)
    refused(vonage, 8)
    vonage.reset()
    vonage.config(barred=["+447700900001"])
    refused(vonage, 7, to="447700900001")
    assert send(vonage).messages[0].status == "0"
    vonage.reset()
    vonage.config(whitelist=["447700900002"])
    refused(vonage, 29)
    assert send(vonage, to="447700900002").messages[0].status == "0"


def test_the_balance_runs_out_with_status_9_and_a_top_up_restores_it(vonage):
    vonage.config(balance=0.07)  # two parts' worth
    assert send(vonage).messages[0].remaining_balance == "0.03670000"
    assert send(vonage).messages[0].remaining_balance == "0.00340000"
    with pytest.raises(SmsError, match="error code 9"):
        send(vonage)
    vonage.config(balance=10)
    assert send(vonage).messages[0].status == "0"
    assert vonage.stats()["submissions"] == 3


def test_rules_answer_a_status_for_one_recipient_a_number_of_times(vonage):
    vonage.config(rules=[{"to": "+447700900003", "action": "status", "status": 1, "times": 2}])
    for _ in range(2):
        with pytest.raises(SmsError, match="error code 1: Throttled"):
            send(vonage, to="447700900003")
    assert send(vonage, to="447700900003").messages[0].status == "0"
    assert send(vonage).messages[0].status == "0"  # other recipients untouched
    assert vonage.stats()["rejections"] == {"1": 2}


def test_http_5xx_stores_nothing(vonage):
    vonage.config(rules=[{"to": GB, "action": "500", "times": 1}, {"to": GB, "action": "503", "times": 1}])
    with pytest.raises(ServerError):
        send(vonage)
    with pytest.raises(HttpRequestError, match="503 response"):
        send(vonage)
    assert vonage.stats()["parts"] == 0
    vonage.config(error_rate_5xx=1.0)
    with pytest.raises(HttpRequestError):
        send(vonage)
    assert vonage.stats()["parts"] == 0


@pytest.mark.parametrize(
    ("action", "error"), [("store_then_500", ServerError), ("store_then_503", HttpRequestError)]
)
def test_store_then_5xx_keeps_the_message(vonage, action, error):
    vonage.config(rules=[{"to": GB, "action": action}])
    with pytest.raises(error):
        send(vonage, client_ref="c-1")
    assert len(vonage.messages(client_ref="c-1")) == 1
    assert vonage.stats()["by_outcome"][action] == 1


def test_store_then_drop_keeps_the_message_and_the_sdk_does_not_hear_of_it(vonage):
    vonage.config(rules=[{"to": GB, "action": "store_then_drop"}])
    # pool_maxsize=1: the SDK resends a request whose connection dropped up to pool_maxsize times
    # (vonage_http_client make_request), so with its default of 10 one send could be stored ten times
    with pytest.raises(requests.exceptions.ConnectionError):
        sdk(vonage, pool_maxsize=1).sms.send(SmsMessage(to=GB, from_="Acme", text="x", client_ref="d-1"))
    assert len(vonage.messages(client_ref="d-1")) == 1


def test_the_sdk_resends_after_a_dropped_connection_by_default(vonage):
    """What the adapter must know: with the SDK's default options a dropped answer is retried at once,
    and the provider ends up with the message twice."""
    vonage.config(rules=[{"to": GB, "action": "store_then_drop", "times": 1}])
    response = sdk(vonage).sms.send(SmsMessage(to=GB, from_="Acme", text="x", client_ref="d-2"))
    assert response.messages[0].status == "0"
    assert len(vonage.messages(client_ref="d-2")) == 2


def test_timeout_stores_nothing_and_accept_then_hang_stores(vonage):
    vonage.config(timeout_hang_seconds=3, rules=[{"to": GB, "action": "timeout", "times": 1}])
    with pytest.raises(requests.exceptions.Timeout):
        sdk(vonage, timeout=1).sms.send(SmsMessage(to=GB, from_="Acme", text="x"))
    assert vonage.stats()["parts"] == 0
    vonage.config(rules=[{"to": GB, "action": "accept_then_hang", "times": 1}])
    with pytest.raises(requests.exceptions.Timeout):
        sdk(vonage, timeout=1).sms.send(SmsMessage(to=GB, from_="Acme", text="x", client_ref="h-1"))
    assert len(vonage.messages(client_ref="h-1")) == 1


def test_outage_503_and_refuse(vonage):
    vonage.config(outage="503")
    with pytest.raises(HttpRequestError, match="503 response"):
        send(vonage)
    vonage.config(outage="refuse")
    with pytest.raises(requests.exceptions.ConnectionError):
        sdk(vonage, pool_maxsize=1).sms.send(SmsMessage(to=GB, from_="Acme", text="x"))
    assert vonage.stats()["parts"] == 0  # the control API stays up on its own port
    vonage.config(outage="none")
    assert send(vonage).messages[0].status == "0"


def test_the_control_api_validates_and_resets(vonage):
    def post(payload: dict) -> int:
        request = urllib.request.Request(
            vonage.control_url + "/_sandbox/config",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10):
                return 200
        except urllib.error.HTTPError as exc:
            return exc.code

    assert post({"nope": 1}) == 400
    assert post({"throttled_rate": 0.7, "internal_error_rate": 0.7}) == 400
    assert post({"rules": [{"to": GB, "action": "status", "status": 0}]}) == 400
    assert post({"signature_method": "crc32"}) == 400
    assert post({"receipt_method": "PUT"}) == 400
    assert post({"latency_ms": 5}) == 200
    send(vonage)
    vonage.reset()
    assert vonage.config()["latency_ms"] == 0 and vonage.stats()["parts"] == 0
    # the API port serves the control API too, over HTTPS
    context = ssl.create_default_context(cafile=vonage.ca_file)
    with urllib.request.urlopen(vonage.base_url + "/_sandbox/health", timeout=10, context=context) as answer:
        assert json.loads(answer.read())["status"] == "ok"


def test_flags_and_environment(monkeypatch):
    from delivery.providers.vonage.sandbox.server import parse_args

    monkeypatch.setenv("VONAGE_SANDBOX_THROTTLED_RATE", "0.25")
    monkeypatch.setenv("VONAGE_SANDBOX_BARRED", "447700900009,+447700900008")
    monkeypatch.setenv("VONAGE_API_KEY", "key12345")
    args = parse_args(["--signature-method", "sha256", "--account-barred", "true", "--port", "0"])
    assert args.throttled_rate == 0.25 and args.signature_method == "sha256" and args.account_barred is True
    assert args.barred == ["447700900009", "+447700900008"] and args.api_key == "key12345" and args.port == 0


def test_the_sandbox_never_imports_django():
    import subprocess
    import sys

    # the parent packages (delivery.providers.<name>) declare the providers: they import no Django settings,
    # apps or ORM (only smsgw.config's ImproperlyConfigured)
    code = (
        "import sys, delivery.providers.vonage.sandbox.server, delivery.providers.vonage.sandbox.process, "
        "delivery.providers.twilio.sandbox.server, delivery.providers.twilio.sandbox.process; "
        "assert not {'django.conf', 'django.apps', 'django.db'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
