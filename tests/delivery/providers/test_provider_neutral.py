"""The core is provider-neutral: a provider is its package under delivery/providers/ plus its line in the
registry (``delivery.providers.PROVIDERS``), and nothing else names it.

The rule the scan enforces: outside ``delivery/providers/<name>/`` (and the registry line itself), no
code identifier and no string literal names a registered provider, and no source carries a provider's
declared sender-pool id pattern or the bounds of its validity period. Comments and docstrings may cite a
provider as an example or as the source of a rule (its documentation is often where a rule comes from);
code may not depend on one.

One package is exempt as a whole: ``scheduling/facade/``, the Twilio-compatible Messages API. It is not a
provider but a dialect of the tenant API, shaped as Twilio's public API so that Twilio's SDKs work
unchanged, and so it must name Twilio. It depends on no provider package (scheduling never imports
delivery: the import contracts), and the rest of the core reaches it only through its neutral names
(``facade.LABEL``, ``facade.CALLBACK_EVENT``, ``facade.callback_headers``).

The second half registers a fake third provider whose package is this module, with no other file
touched, and sends a message through it by name.
"""

from __future__ import annotations

import ast
import io
import tokenize
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from delivery.providers import PROVIDERS, Package, get_adapter, register, unregister
from delivery.providers.base import (
    ErrorClass,
    ErrorInfo,
    Outcome,
    ProviderAdapter,
    Submission,
    SubmitResult,
)
from delivery.sending import worker as sending
from scheduling.models import Message, Status
from smsgw.config import providers as declarations
from smsgw.config.providers import Capabilities, ProviderSettings, SenderPools, ValidityBounds
from tests.factories import messages_bulk

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[3]
CORE = ("config", "reporting", "smsgw", "scheduling", "delivery", "receipts")
REGISTRY = ROOT / "delivery" / "providers" / "__init__.py"
DIALECTS = (ROOT / "scheduling" / "facade",)


# --- the scan ------------------------------------------------------------------------------------------


def _registered() -> dict[str, Path]:
    """Each registered provider package: its name and its folder."""
    out = {}
    for name, factory in PROVIDERS.items():
        if isinstance(factory, Package) and factory.module.startswith("delivery.providers."):
            out[name] = ROOT.joinpath(*factory.module.split("."))
    return out


def _core_sources() -> list[Path]:
    packages = [*_registered().values(), *DIALECTS]
    files = []
    for top in CORE:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "migrations" in path.parts or any(path.is_relative_to(p) for p in packages):
                continue
            files.append(path)
    return files


def _docstring_starts(source: str) -> set[tuple[int, int]]:
    starts = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                starts.add((value.lineno, value.col_offset))
    return starts


def _code_tokens(path: Path):
    """(line, kind, text) of every identifier, string (docstrings excepted) and number in ``path``."""
    source = path.read_text()
    docstrings = _docstring_starts(source)
    string_kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME:
            yield tok.start[0], "identifier", tok.string
        elif tok.type in string_kinds and tok.start not in docstrings:
            yield tok.start[0], "string", tok.string
        elif tok.type == tokenize.NUMBER:
            yield tok.start[0], "number", tok.string


def _registry_line(path: Path, line: int, name: str) -> bool:
    """The registry's own line for ``name`` (the one place outside its package that names it)."""
    if path != REGISTRY:
        return False
    text = path.read_text().splitlines()[line - 1]
    return f'"{name}": Package("delivery.providers.{name}")' in text


def test_the_scan_sees_the_core_and_skips_the_provider_packages():
    files = {p.relative_to(ROOT).as_posix() for p in _core_sources()}
    assert "delivery/sending/worker.py" in files and "config/settings/providers.py" in files
    assert "scheduling/messages/service.py" in files and "receipts/api.py" in files
    assert not any(f.startswith("delivery/providers/twilio/") for f in files)
    assert not any(f.startswith("scheduling/facade/") for f in files)
    assert "receipts/webhooks.py" in files and "config/urls.py" in files and "config/admin.py" in files
    assert _registered(), "no provider package registered"


def test_no_core_module_names_a_provider_or_its_formats():
    names = {name.lower() for name in _registered()}
    patterns = [c.sender_pools.pattern for c in declarations.declared().values() if c.sender_pools]
    bounds = {
        str(value)
        for c in declarations.declared().values()
        if c.validity_period is not None
        for value in (c.validity_period.maximum,)
        if value > 1000  # a small bound (1) is every counter's start, not a provider's
    }
    found = []
    for path in _core_sources():
        rel = path.relative_to(ROOT).as_posix()
        for line, kind, text in _code_tokens(path):
            lowered = text.lower()
            for name in names:
                if name in lowered and not _registry_line(path, line, name):
                    found.append(f"{rel}:{line}: {kind} {text[:60]!r} names provider {name!r}")
            if kind == "string" and any(p in text for p in patterns):
                found.append(f"{rel}:{line}: a provider's sender-pool pattern {text[:60]!r}")
            if kind == "number" and text.replace("_", "") in bounds:
                found.append(f"{rel}:{line}: a provider's validity bound {text}")
    assert not found, "the core names a provider:\n" + "\n".join(found)


# --- a fake third provider, its package being this module ---------------------------------------------

FAKE = "modprov"
CAPABILITIES = Capabilities(
    lookup_by_recipient=False,
    fetch_by_id=False,
    validity_period=ValidityBounds(minimum=300, maximum=600),
    per_part_ids=True,
    sender_pools=SenderPools(pattern=r"POOL-[a-z]{4}", description="POOL- and 4 lowercase letters"),
    signature_schemes=("none",),
)


def load_settings(production: bool) -> ProviderSettings:
    return ProviderSettings(
        values={"MODPROV_TOKEN": "modprov-secret-token"},
        problem=None if not production else "MODPROV_TOKEN is a test's",
        request_timeout=2.0,
        request_timeout_setting="MODPROV_TIMEOUT_SECONDS",
        secret_settings=("MODPROV_TOKEN",),
    )


class FakeAdapter(ProviderAdapter):
    capabilities = CAPABILITIES

    def __init__(self, name: str) -> None:
        self.name = name
        self.submitted: list[Submission] = []

    @property
    def account(self) -> str:
        return "fake-account"

    @property
    def request_timeout(self) -> float:
        return 2.0

    def submit_many(self, submissions: list[Submission]) -> list[SubmitResult]:
        self.submitted.extend(submissions)
        now = timezone.now()
        return [
            SubmitResult(
                outcome=Outcome.ACCEPTED,
                provider_message_id=f"fake-{s.message_id}",
                provider_status="accepted",
                validity_period=self.clamp_validity(s.validity_at(now)),
            )
            for s in submissions
        ]

    def classify(self, error_code: str, http_status: int | None = None) -> ErrorInfo:
        return ErrorInfo(ErrorClass.TRANSIENT, "fake error")

    def normalize_status(self, raw_status: str) -> str:
        return raw_status if raw_status in ("sent", "delivered", "failed") else ""

    def status_callback_url(self, base_url: str, message_ref: str, attempt_number: int) -> str:
        return f"{base_url.rstrip('/')}/receipts/{self.name}/?m={message_ref}" if base_url else ""


def create_adapter(name: str) -> ProviderAdapter:
    return FakeAdapter(name)


@pytest.fixture
def fake_provider(settings):
    values = register(FAKE, __name__)  # what one registry line does at start-up
    for key, value in values.items():
        setattr(settings, key, value)
    get_adapter.cache_clear()
    yield get_adapter(FAKE)
    unregister(FAKE)


def test_a_registered_provider_is_asked_not_assumed(fake_provider):
    assert isinstance(fake_provider, FakeAdapter) and fake_provider.name == FAKE
    assert get_adapter(FAKE).capabilities.per_part_ids is True
    assert declarations.capabilities(FAKE) == CAPABILITIES
    # Its validity bounds, not another provider's, clamp what it is sent with.
    now = timezone.now()
    assert sending.validity_period(now + timedelta(hours=5), now, fake_provider) == 600
    assert sending.validity_period(now + timedelta(seconds=5), now, fake_provider) == 300
    # Its sender-pool ids are accepted where pools are validated (scheduling cannot import delivery).
    assert declarations.sender_pool_problem("POOL-abcd") is None
    assert "POOL- and 4 lowercase letters" in (declarations.sender_pool_problem("POOL-1") or "")
    # Its secrets are redacted from log lines.
    from smsgw.runtime.logs import redact

    assert "modprov-secret-token" not in redact("token=modprov-secret-token")


def test_a_message_is_sent_through_the_fake_provider_by_name(fake_provider, api):
    now = timezone.now()
    pks = messages_bulk(api.tenant, 2, due_at=now - timedelta(seconds=1))
    Message.objects.filter(pk__in=pks).update(provider=FAKE, status=Status.QUEUED)  # released

    report = sending.send_batch(pks, provider=FAKE)

    assert report.claimed == 2
    assert sorted(s.message_id for s in fake_provider.submitted) == sorted(pks)
    assert all(300 <= s.validity_period <= 600 for s in fake_provider.submitted)
    rows = {m.pk: (m.status, m.provider, m.provider_message_id) for m in Message.objects.filter(pk__in=pks)}
    assert rows == {pk: (Status.SENT, FAKE, f"fake-{pk}") for pk in pks}


def test_unregistering_forgets_it(settings):
    register(FAKE, __name__)
    unregister(FAKE)
    assert FAKE not in PROVIDERS and FAKE not in declarations.declared()


def test_an_uncertain_message_of_a_provider_that_cannot_be_asked_waits(fake_provider, api):
    """Neither fetch by id nor look-up by recipient: absence can never be proven, so it is never resent."""
    from delivery.sending.reconcile import message_reconcile

    now = timezone.now()
    (pk,) = messages_bulk(api.tenant, 1, due_at=now - timedelta(seconds=1))
    Message.objects.filter(pk=pk).update(provider=FAKE, status=Status.SENDING)

    assert message_reconcile(pk) == "inconclusive"
    msg = Message.objects.get(pk=pk)
    assert msg.status == Status.SENDING
    assert msg.events.filter(kind="reconcile_inconclusive").exists()
