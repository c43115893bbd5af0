"""manage.py exports_run [--now ISO] [--max-days N]: one pass of the daily exports in the foreground
(retention.exports.exports_run): write the due days' files, then remove the expired ones. The retention
job runs the same pass; this is for an operator's catch-up or a check. Safe beside the job (a day two
runs write is recorded once; the loser removes its file)."""

from __future__ import annotations

import argparse
import json

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from retention.exports import EXPORT_RUN_DAYS, exports_run


def _instant(raw: str):
    value = parse_datetime(raw)
    if value is None:
        raise argparse.ArgumentTypeError(f"must be an ISO 8601 instant, got {raw!r}")
    if timezone.is_naive(value):
        raise argparse.ArgumentTypeError(f"needs an offset or Z (an instant, not a wall time), got {raw!r}")
    return value


class Command(BaseCommand):
    help = "Write the due daily exports and remove the expired ones (one pass)."

    def add_arguments(self, parser):
        parser.add_argument("--now", type=_instant, default=None, help="the pass's clock (default: now)")
        parser.add_argument(
            "--max-days", type=int, default=EXPORT_RUN_DAYS, help="tenant-days written at most"
        )

    def handle(self, *args, now, max_days, **opts):
        if max_days < 1:
            raise CommandError("--max-days must be at least 1")
        result = exports_run(now=now or timezone.now(), max_days=max_days)
        self.stdout.write("EXPORTS_DONE " + json.dumps(result))
