"""A provider is one package with its whole kit, registered by one line (issue 39's measure: "files outside
a new provider's own folder that a new HTTP provider touches: 1").

``tests/fakeprovider/`` is a third HTTP provider built as a provider package is: its adapter, settings and
capabilities, its signed receipts, its sandbox (a real HTTP server), its kit and its own tests, all inside
it. Registered by one line (``SMSGW_PROVIDER_PACKAGES=fakeprov=tests.fakeprovider``), it is:

- started by the embedded run's supervisor, from what the registry lists (``python -m
  delivery.providers.kits embedded``), with the environment the gateway needs to reach it;
- started by the integration harness (``provider_pipeline``), and sent through end to end by real
  ``celery worker``, ``celery beat`` and gunicorn processes: its receipts come back signed to
  ``/receipts/fakeprov/`` and every message ends ``delivered``, submitted once;
- named by no file outside its folder but the one that registers it (this one), and the house's tooling
  (supervisor, harness, kits, process helpers) names no provider at all: nothing there needs an edit
  for a new one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from delivery.providers import PACKAGES_SETTING, get_adapter, packages_from, register, unregister
from scheduling.models import Message, Status
from tests.delivery.providers.test_provider_neutral import _code_tokens, _registered
from tests.factories import recipient, tenant_with_key
from tests.harness import start_web
from tests.processes import free_port
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]
NAME, PACKAGE = "fakeprov", "tests.fakeprovider"
FOLDER = ROOT / "tests" / "fakeprovider"
# The one line that registers it: in the environment of every process (the registry reads it at import).
REGISTRY_LINE = f"{NAME}={PACKAGE}"
# The house's tooling that starts, reaches and counts a provider's sandbox: none of it may name one.
TOOLING = (
    "deploy/embedded.py",
    "delivery/providers/kits.py",
    "tests/harness.py",
    "tests/processes.py",
    "tests/fixtures.py",
    "conftest.py",
    "bench/harness/devprocs.py",
)


@pytest.fixture
def fake_registered(settings, monkeypatch):
    """What the registry line does, in this process and in every process a test starts."""
    monkeypatch.setenv(PACKAGES_SETTING, REGISTRY_LINE)
    for key, value in register(NAME, PACKAGE).items():
        setattr(settings, key, value)
    get_adapter.cache_clear()
    yield
    unregister(NAME)


def test_the_registry_line_is_read_from_the_environment_and_a_bad_one_is_refused():
    assert list(packages_from(f" {REGISTRY_LINE} ")) == [NAME]
    assert packages_from(f" {REGISTRY_LINE} ")[NAME].module == PACKAGE
    from django.core.exceptions import ImproperlyConfigured

    for bad in ("fakeprov", "FakeProv=tests.fakeprovider", "fakeprov=tests/fakeprovider", "twilio=x.y"):
        with pytest.raises(ImproperlyConfigured, match=PACKAGES_SETTING):
            packages_from(bad)
    with pytest.raises(ImproperlyConfigured, match="twice"):
        packages_from(f"{REGISTRY_LINE},{REGISTRY_LINE}")


@pytest.mark.django_db
def test_its_callback_endpoints_come_from_the_registry(fake_registered, client):
    """/receipts/fakeprov/ is its receipt endpoint (an unsigned receipt is refused there, 403); it declares
    no inbound, so /inbound/fakeprov/ is a 404 naming it, not a 2xx that drops the message."""
    form = "application/x-www-form-urlencoded"
    unsigned = client.post("/receipts/fakeprov/", "id=FP0000000001&status=delivered", content_type=form)
    assert unsigned.status_code == 403
    # a multipart form is not how it posts (its capabilities say so): refused before the signature
    assert client.post("/receipts/fakeprov/", {"id": "FP0000000001"}).status_code == 415
    inbound = client.post("/inbound/fakeprov/", {"from": "+14155550100", "to": "+14155550101", "body": "hi"})
    assert inbound.status_code == 404 and NAME in inbound.content.decode()


def test_a_transport_the_house_cannot_run_is_refused_when_declared():
    from smsgw.config import providers as declarations
    from smsgw.config.providers import Capabilities

    with pytest.raises(ValueError, match="transport 'session'"):
        declarations.declare("smppish", Capabilities(transport="session"))
    assert "smppish" not in declarations.declared()


def _supervisor():
    spec = importlib.util.spec_from_file_location("embedded_supervisor", ROOT / "deploy" / "embedded.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_embedded_supervisor_starts_the_registered_providers_sandbox(tmp_path):
    """The registry, read as deploy/run-embedded.sh reads it, lists the fake's sandbox after the built-in
    ones; the supervisor's child for it starts, answers its health URL, and is stopped last."""
    port = free_port()
    env = {**os.environ, PACKAGES_SETTING: REGISTRY_LINE, "SMSGW_FAKEPROV_SANDBOX_PORT": str(port)}
    listed = json.loads(
        subprocess.run(
            [sys.executable, "-m", "delivery.providers.kits", "embedded", str(tmp_path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert [s["provider"] for s in listed] == [*_registered(), NAME]
    [fake] = [s for s in listed if s["provider"] == NAME]
    assert fake["gateway_env"] == {"FAKEPROV_BASE_URL": f"http://127.0.0.1:{port}"}

    supervisor = _supervisor()
    gateway: dict[str, str] = {"FAKEPROV_BASE_URL": "http://operator.example"}
    supervisor.gateway_env(listed, gateway)
    assert gateway["FAKEPROV_BASE_URL"] == "http://operator.example"  # an operator's own value wins
    children = supervisor.sandbox_children(listed)
    [child] = [c for c in children if c.name == f"{NAME}-sandbox"]
    assert child.stops_last and all(c.stops_last for c in children)
    child.start()
    try:
        import urllib.request

        def healthy() -> bool:
            with urllib.request.urlopen(child.ready_url, timeout=2) as response:
                return response.status == 200

        wait_for(healthy, 15, "the fake provider's sandbox to answer")
    finally:
        child.signal_group(15)
        child.popen.wait(10)


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_messages_go_through_the_registered_provider_end_to_end(fake_registered, provider_pipeline, settings):
    """Real worker, beat and gunicorn processes send 6 messages through the fake provider's sandbox (its
    adapter over HTTP), and its signed receipts come back to /receipts/fakeprov/. Final state: all 6
    ``delivered`` with the fake's ids, each submitted once, every receipt taken."""
    settings.SMSGW_PROVIDER = NAME  # messages are born with the deployment's provider: this process's too
    pipeline = provider_pipeline(NAME)
    start_web(pipeline)
    _tenant, key = tenant_with_key("kit")
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    ids = []
    for i in range(6):
        answer = client.post("/v1/messages", {"to": recipient(i), "body": f"kit {i}"}, format="json")
        assert answer.status_code in (200, 201, 202), answer.content
        ids.append(answer.json()["id"])
    pks = list(Message.objects.filter(public_id__in=ids).values_list("pk", flat=True))
    assert len(pks) == 6 and set(Message.objects.filter(pk__in=pks).values_list("provider", flat=True)) == {
        NAME
    }
    connection.close()
    pipeline.worker()
    pipeline.beat()
    pipeline.wait_all_final(pks, timeout=90, final=(Status.DELIVERED, Status.FAILED, Status.UNDELIVERED))
    msgs = list(Message.objects.filter(pk__in=pks))
    assert {m.status for m in msgs} == {Status.DELIVERED}
    assert all(m.provider_message_id.startswith("FP") for m in msgs)
    assert pipeline.submissions_by_recipient() == {recipient(i): 1 for i in range(6)}
    assert pipeline.sandbox.stats()["receipts_failed"] == 0


# Where code, scripts, settings and data live (not docs/, which describes the fake as an example).
CODE_FOLDERS = (
    "config",
    "delivery",
    "deploy",
    "bench",
    "sandbox",
    "scheduling",
    "receipts",
    "smsgw",
    "tests",
)


def _files_naming(text: str) -> set[str]:
    """The files outside the fake's folder that name ``text``."""
    found = set()
    for top in CODE_FOLDERS:
        for path in (ROOT / top).rglob("*"):
            if not path.is_file() or path.suffix not in (".py", ".sh", ".toml", ".json", ".yml", ".service"):
                continue
            if path.is_relative_to(FOLDER) or "node_modules" in path.parts:
                continue
            if text in path.read_text(errors="replace"):
                found.add(path.relative_to(ROOT).as_posix())
    for path in ROOT.glob("*"):
        if path.is_file() and path.suffix in (".py", ".toml") and text in path.read_text(errors="replace"):
            found.add(path.name)
    return found


def test_outside_its_folder_only_the_registering_line_names_the_new_provider():
    here = Path(__file__).relative_to(ROOT).as_posix()
    assert _files_naming(PACKAGE) == {here}
    assert _files_naming(NAME) - {"tests/durations.json"} == {here}


def test_the_tooling_names_no_provider():
    """The supervisor, the harness, the kits' registry reader and the process helpers name no registered
    provider in code (comments and docstrings may cite one as an example)."""
    names = {name.lower() for name in _registered()}
    found = []
    for rel in TOOLING:
        for line, kind, text in _code_tokens(ROOT / rel):
            words = {
                w
                for w in text.lower()
                .replace('"', " ")
                .replace("'", " ")
                .replace(".", " ")
                .replace("_", " ")
                .replace("-", " ")
                .split()
            }
            if words & names:
                found.append(f"{rel}:{line}: {kind} {text}")
    assert not found, "the tooling names a provider:\n" + "\n".join(found)
