"""Routing rules edited in the admin (delivery.routing.rules reads them; delivery.routing.service checks
them): a rule for one tenant, or for all tenants (``tenant`` null), and its legs. Imported by
delivery.models, so they belong to the delivery app."""

from __future__ import annotations

from django.core.validators import MaxValueValidator
from django.db import models, transaction
from django.db.models import Q
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from scheduling.models import Priority

# A message's route is "<source>:<name>" ("tenant:" is the longest source): it must fit the 64
# characters a message and its attempts keep.
NAME_MAX = 48
MAX_WEIGHT = 1000


class RouteRule(models.Model):
    """Messages whose destination matches (country and/or prefix; neither: all) and, when set, of one
    priority class go through this rule's legs. A tenant's own rules are tried before those for all
    tenants, each by ``position`` (then id); the settings' ``SMSGW_ROUTES`` come after both."""

    tenant = models.ForeignKey(
        "smsgw.Tenant",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="empty: a rule for all tenants (tried after each tenant's own)",
    )
    name = models.CharField(max_length=NAME_MAX, help_text="shown on each message it routes")
    position = models.PositiveIntegerField(default=0, help_text="lower first")
    country = models.CharField(
        max_length=2, blank=True, help_text="ISO 3166 alpha-2 of the destination, e.g. GB; empty: any"
    )
    prefix = models.CharField(max_length=16, blank=True, help_text="E.164 prefix, e.g. +4477; empty: any")
    priority = models.CharField(
        max_length=16, blank=True, choices=Priority.choices, help_text="empty: any priority class"
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("tenant_id", "position", "id")
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="routerule_name_per_tenant"),
            # NULLs are distinct in a unique index: the rules for all tenants need their own.
            models.UniqueConstraint(
                fields=["name"], condition=Q(tenant__isnull=True), name="routerule_name_all_tenants"
            ),
        ]

    def __str__(self) -> str:
        return f"{'tenant' if self.tenant_id else 'all'}:{self.name}"


class RouteLeg(models.Model):
    """One (provider, account, sender) of a rule, in failover order. ``account`` empty: the provider's
    configured account; ``sender`` empty: the message's own. The first leg tried is drawn among those of
    weight > 0 in proportion to their weights; a leg of weight 0 is a standby."""

    rule = models.ForeignKey(RouteRule, on_delete=models.CASCADE, related_name="legs")
    position = models.PositiveSmallIntegerField(default=0, help_text="lower first")
    provider = models.CharField(max_length=32)
    account = models.CharField(max_length=64, blank=True, help_text="empty: the provider's configured one")
    sender = models.CharField(max_length=64, blank=True, help_text="empty: the message's own sender")
    weight = models.PositiveSmallIntegerField(
        default=1,
        validators=[MaxValueValidator(MAX_WEIGHT)],
        help_text="0 to 1000; 0: a standby, reached only by failover",
    )

    class Meta:
        ordering = ("rule_id", "position", "id")
        constraints = [
            models.UniqueConstraint(fields=["rule", "provider", "account", "sender"], name="routeleg_unique"),
            models.CheckConstraint(condition=Q(weight__lte=MAX_WEIGHT), name="routeleg_weight_max"),
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.account or '-'}/{self.sender or '-'} weight {self.weight}"


@receiver(post_save, sender=RouteRule)
@receiver(post_delete, sender=RouteRule)
@receiver(post_save, sender=RouteLeg)
@receiver(post_delete, sender=RouteLeg)
def _routes_changed(**kwargs) -> None:
    """This process saved or deleted a rule or a leg: its next message reads the rules again. Once now
    (this transaction's own reads) and once after the commit (a thread that reloaded meanwhile read the
    rows as they were before it)."""
    from delivery.routing.rules import routes_cache_clear

    routes_cache_clear()
    transaction.on_commit(routes_cache_clear)
