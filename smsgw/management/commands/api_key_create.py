"""Issue another API key for an existing tenant, with the scopes it needs; the key alone is the last line."""

from django.core.management.base import BaseCommand, CommandError

from smsgw.management.options import scopes_option
from smsgw.models import Tenant, api_key_create
from smsgw.tenancy.auth import api_key_sid


class Command(BaseCommand):
    help = "Issue an API key for a tenant with chosen scopes (shown once; only its hash is stored)."

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="The tenant's slug.")
        parser.add_argument("--name", default="default", help="What the key is for (shown in the admin).")
        # Required: a second key is usually for one job, so its scopes are chosen, never defaulted.
        parser.add_argument(
            "--scopes",
            required=True,
            help="Comma-separated (docs/api.md#scopes), e.g. messages:read,schedules:read; * for everything.",
        )

    def handle(self, *args, **opts):
        scopes = scopes_option(opts["scopes"])
        name = opts["name"].strip()
        if not name or len(name) > 100:
            raise CommandError("--name: 1 to 100 characters")
        tenant = Tenant.objects.filter(slug=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {opts['tenant']!r}")
        key, raw = api_key_create(tenant=tenant, name=name, scopes=scopes)
        self.stderr.write(
            f"tenant {tenant.slug}: API key {key.prefix}… ({key.name}) with scopes {','.join(key.scopes)}; "
            f"API key SID {api_key_sid(key)} (store the key now, it is not kept)"
        )
        self.stdout.write(raw)
