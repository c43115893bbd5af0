"""Change-list filters for the admin: a from/to date range (Django's own offers only fixed periods), the
reason code, and the ones the console's landing page links to (due now, sent or failed recently, provider,
error code)."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import Q
from django.utils import timezone

from scheduling.lifecycle.reasons import ReasonCode


class DateRangeFilter(admin.FieldListFilter):
    """Two date inputs, inclusive, UTC dates: ``?due_at__date__gte=2026-12-01&due_at__date__lte=...``."""

    template = "admin/scheduling/date_range_filter.html"

    def __init__(self, field, request, params, model, model_admin, field_path):
        self.lookup_gte = f"{field_path}__date__gte"
        self.lookup_lte = f"{field_path}__date__lte"
        super().__init__(field, request, params, model, model_admin, field_path)
        self.title = f"{getattr(field, 'verbose_name', field_path)} (UTC dates)"
        self.values: dict[str, date] = {}
        for lookup in (self.lookup_gte, self.lookup_lte):
            raw = self.used_parameters.get(lookup)
            value = (raw[-1] if isinstance(raw, list) else raw) or ""
            if not value:
                self.used_parameters.pop(lookup, None)
                continue
            try:
                self.values[lookup] = date.fromisoformat(str(value))
            except ValueError as exc:
                raise IncorrectLookupParameters(f"{lookup}: not a date (YYYY-MM-DD)") from exc
            self.used_parameters[lookup] = value

    def expected_parameters(self):
        return [self.lookup_gte, self.lookup_lte]

    def has_output(self):
        return True

    def queryset(self, request, queryset):
        return queryset.filter(**self.values) if self.values else queryset

    def choices(self, changelist):
        # One "choice": the form, with the change list's other parameters kept as hidden inputs.
        keep = {
            k: v for k, v in changelist.get_filters_params().items() if k not in self.expected_parameters()
        }
        if changelist.query:
            keep["q"] = changelist.query
        yield {
            "gte_name": self.lookup_gte,
            "lte_name": self.lookup_lte,
            "gte": self.used_parameters.get(self.lookup_gte, ""),
            "lte": self.used_parameters.get(self.lookup_lte, ""),
            "keep": [(k, item) for k, v in keep.items() for item in (v if isinstance(v, list) else [v])],
            "clear_url": changelist.get_query_string(remove=self.expected_parameters()),
        }


class ReasonCodeFilter(admin.SimpleListFilter):
    """The machine-readable reason (ReasonCode), e.g. ``reconciled_ambiguous``: the uncertain messages an
    operator should check. Lists the codes themselves, never a DISTINCT over the message table."""

    title = "reason"
    parameter_name = "reason_code"

    def lookups(self, request, model_admin):
        return ReasonCode.choices

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(reason_code=value) if value else queryset


class DueNowFilter(admin.SimpleListFilter):
    """The due backlog (``?due=now``): scheduled messages whose time has come (run_after <= now), the
    console's "Due backlog". Read through the sweep's own index (msg_scheduled_due)."""

    title = "due"
    parameter_name = "due"

    def lookups(self, request, model_admin):
        return (("now", "due now, not released yet"),)

    def queryset(self, request, queryset):
        if self.value() == "now":
            return queryset.filter(status="scheduled", run_after__lte=timezone.now())
        return queryset


# The finished statuses, as the msg_finished partial index names them (its predicate must be implied).
FINISHED = ("delivered", "undelivered", "failed", "cancelled", "expired")
WITHIN = {"1h": timedelta(hours=1), "24h": timedelta(hours=24)}


class _WithinFilter(admin.SimpleListFilter):
    """Messages sent or failed in the last hour or day (``?sent=1h``): the console's last hour.
    Django's own date filter offers days only."""

    def lookups(self, request, model_admin):
        return (("1h", "in the last hour"), ("24h", "in the last 24 hours"))

    def queryset(self, request, queryset):
        window = WITHIN.get(self.value() or "")
        if window is None:
            return queryset
        return queryset.filter(self.recent(timezone.now() - window))

    def recent(self, since) -> Q:
        raise NotImplementedError


class SentWithinFilter(_WithinFilter):
    """Sent since: still ``sent`` (the msg_sent_lookup index on sent_at), or finished since (the
    msg_finished index on updated_at, which a later move only advances). Never a scan of sent_at."""

    title = "sent"
    parameter_name = "sent"

    def recent(self, since) -> Q:
        finished = Q(status__in=FINISHED, updated_at__gte=since, sent_at__gte=since)
        return Q(status="sent", sent_at__gte=since) | finished


class FailedWithinFilter(_WithinFilter):
    """Failed or undelivered (failed_at, set by either move) since; read through msg_finished."""

    title = "failed"
    parameter_name = "failed"

    def recent(self, since) -> Q:
        return Q(status__in=("failed", "undelivered"), updated_at__gte=since, failed_at__gte=since)


class ProviderFilter(admin.SimpleListFilter):
    """The provider a message is sent through: the declared providers (smsgw.config.providers), never a
    DISTINCT over the message table."""

    title = "provider"
    parameter_name = "provider"

    def lookups(self, request, model_admin):
        from smsgw.config.providers import declared

        names = set(declared())
        asked = self.value()
        if asked:
            names.add(asked)
        return [(name, name) for name in sorted(names)]

    def queryset(self, request, queryset):
        return queryset.filter(provider=self.value()) if self.value() else queryset


class ErrorCodeFilter(admin.SimpleListFilter):
    """The provider's error code (``?error_code=30003``), as the console's failure links name it. Codes
    are the providers' own and many: the choice lists only the code asked for, and the failure panel of
    the landing page is where codes are found."""

    title = "error code"
    parameter_name = "error_code"

    def lookups(self, request, model_admin):
        return [(self.value(), self.value())] if self.value() else []

    def queryset(self, request, queryset):
        return queryset.filter(error_code=self.value()) if self.value() else queryset
