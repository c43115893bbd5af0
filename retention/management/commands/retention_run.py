"""Run the retention job once, now (what beat starts every SMSGW_RETENTION_INTERVAL_SECONDS)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from retention.jobs import retention_run


class Command(BaseCommand):
    help = "Run the retention job once: history moves, horizons, exports; prints what each pass did."

    def add_arguments(self, parser):
        parser.add_argument("--budget", type=float, default=120.0, help="seconds before it stops (120)")

    def handle(self, *args, budget: float, **options):
        self.stdout.write(json.dumps(retention_run(budget_seconds=budget), sort_keys=True))
