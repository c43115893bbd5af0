"""Change-list filters for the admin: a from/to date range (Django's own offers only fixed periods) and
the reason code."""

from __future__ import annotations

from datetime import date

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters

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
