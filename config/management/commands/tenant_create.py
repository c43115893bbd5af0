"""Create a tenant (or reuse one by slug) and print a new API key once; the key alone is the last line."""

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils.text import slugify

from scheduling import facade
from smsgw.channels import DEFAULT_CHANNEL, AddressError
from smsgw.management.options import scopes_option
from smsgw.models import Tenant, api_key_create
from smsgw.tenancy.auth import api_key_sid
from smsgw.tenancy.scopes import FULL_ACCESS
from smsgw.tenancy.senders import SenderError, default_senders_assign
from smsgw.values.timeutil import TimeResolutionError, parse_timezone


class Command(BaseCommand):
    help = "Create a tenant and print a new API key (shown once; only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--slug", default="")
        parser.add_argument("--from", dest="default_from", default="", help="Default sender (E.164).")
        parser.add_argument("--messaging-service-sid", dest="sender_pool", default="")
        parser.add_argument(
            "--shared",
            action="store_true",
            help="--from / --messaging-service-sid may be another tenant's: share it (docs/senders.md)",
        )
        parser.add_argument("--timezone", default="UTC")
        parser.add_argument(
            "--allowed-countries",
            default="",
            help="Countries it may send to: ISO 3166 alpha-2, comma-separated (default: its own only).",
        )
        parser.add_argument(
            "--scopes",
            default=FULL_ACCESS,
            help="The key's scopes, comma-separated (docs/api.md#scopes), e.g. messages:send,messages:read; "
            "default: * (full access).",
        )
        parser.add_argument(
            "--if-exists",
            choices=["error", "new-key"],
            default="error",
            help="When the slug exists: fail (default) or issue another key for it.",
        )

    def handle(self, *args, **opts):
        slug = opts["slug"] or slugify(opts["name"])
        if not slug:
            raise CommandError("name must contain letters or digits")
        try:
            parse_timezone(opts["timezone"])
        except TimeResolutionError as exc:
            raise CommandError(str(exc)) from exc
        default_from = opts["default_from"]
        if default_from.startswith("+"):
            try:
                default_from = DEFAULT_CHANNEL.address(default_from)
            except AddressError as exc:
                raise CommandError(f"--from: {exc}") from exc
        scopes = scopes_option(opts["scopes"])
        countries = sorted({c.strip().upper() for c in opts["allowed_countries"].split(",") if c.strip()})
        bad = [c for c in countries if len(c) != 2 or not c.isalpha()]
        if bad:
            raise CommandError(f"--allowed-countries: {bad[0]!r} is not an ISO 3166 alpha-2 code")
        with transaction.atomic():
            tenant = Tenant.objects.filter(slug=slug).first()
            if tenant is not None and opts["if_exists"] == "error":
                raise CommandError(f"tenant {slug!r} exists; use --if-exists new-key to issue another key")
            if tenant is None:
                tenant = Tenant.objects.create(
                    name=opts["name"],
                    slug=slug,
                    default_from=default_from,
                    sender_pool=opts["sender_pool"],
                    default_timezone=opts["timezone"],
                    allowed_countries=countries,
                )
                # The tenant owns the senders it is given (smsgw.tenancy.senders): another tenant's is
                # refused, and the whole creation with it, unless --shared.
                try:
                    default_senders_assign(tenant=tenant, shared=opts["shared"])
                except SenderError as exc:
                    raise CommandError(f"--from / --messaging-service-sid: {exc}") from exc
            key, raw = api_key_create(tenant=tenant, scopes=scopes)
        self.stderr.write(
            f"tenant {tenant.slug} (id {tenant.pk}); API key {key.prefix}… with scopes "
            f"{','.join(key.scopes) or '(none)'} (store it now, it is not kept)"
        )
        # The Twilio-compatible API (docs/coming-from-twilio.md): Client(<account SID>, <API key>), or
        # Client(<API key SID>, <the key's secret>, <account SID>); status callbacks are signed with the key.
        self.stderr.write(
            f"{facade.LABEL}: account SID {tenant.facade_account_sid}; "
            f"API key SID {api_key_sid(key)}; status callbacks signed with {tenant.callback_signing_key}"
        )
        self.stdout.write(raw)
