"""The operator console's site: titled smsgw, and opening on health at a glance (reporting.console)
above the list of tables, instead of Django's "Django administration" and the list alone. Installed as
the admin's default site (config.admin_site.ConsoleAdminConfig in INSTALLED_APPS), so every
``admin.register`` and ``admin.site`` of the apps is this site."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig


class ConsoleSite(admin.AdminSite):
    site_header = "smsgw"
    site_title = "smsgw"
    index_title = "Health at a glance"
    index_template = "admin/smsgw/landing.html"

    def index(self, request, extra_context=None):
        from reporting.console import landing_context

        # admin_view already marks the page never cached: its figures are of now.
        return super().index(request, {**landing_context(request), **(extra_context or {})})


class ConsoleAdminConfig(AdminConfig):
    default_site = "config.admin_site.ConsoleSite"
