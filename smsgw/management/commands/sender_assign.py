"""Assign a sender to a tenant, or release it (smsgw.tenancy.senders, docs/senders.md)."""

from django.core.management.base import BaseCommand, CommandError

from smsgw.models import Tenant
from smsgw.tenancy.senders import SENDER_HELP, SenderError, sender_assign, sender_release


class Command(BaseCommand):
    help = (
        "Give a tenant a sender it may send from (a number, short code, alphanumeric id or sender pool), "
        "or take it back with --release. Another tenant's sender needs --shared."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant", help="the tenant's slug")
        parser.add_argument("sender", help=SENDER_HELP)
        parser.add_argument("--provider", default="", help="valid on this provider only (default: any)")
        parser.add_argument(
            "--account", default="", help="valid on this provider account only (default: any)"
        )
        parser.add_argument(
            "--shared",
            action="store_true",
            help="share it with the tenants that already have it (an opt-out on it then applies to each)",
        )
        parser.add_argument("--release", action="store_true", help="take the sender from the tenant")

    def handle(self, *args, **opts):
        tenant = Tenant.objects.filter(slug=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {opts['tenant']!r}")
        try:
            if opts["release"]:
                removed = sender_release(
                    tenant=tenant, sender=opts["sender"], provider=opts["provider"] or None
                )
                if not removed:
                    raise CommandError(f"{opts['sender']} is not a sender of {tenant.slug}")
                self.stdout.write(f"released {opts['sender']} from {tenant.slug}")
                return
            row = sender_assign(
                tenant=tenant,
                sender=opts["sender"],
                provider=opts["provider"],
                account=opts["account"],
                shared=opts["shared"],
            )
        except SenderError as exc:
            raise CommandError(f"sender: {exc}") from exc
        where = "/".join(p for p in (row.provider, row.account) if p) or "any provider"
        self.stdout.write(
            f"{tenant.slug} may send from {row.value} ({row.get_kind_display()}, {where})"
            + (" - shared" if row.shared else "")
        )
