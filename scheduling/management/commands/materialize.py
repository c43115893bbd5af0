"""manage.py materialize: run the schedule materializer in the foreground (operators, tests, bench).

Beat runs it every SMSGW_MATERIALIZE_INTERVAL on the sweep workers; this command is the same code for
an on-demand catch-up. Safe next to beat and other copies of itself (SKIP LOCKED, unique keys)."""

import json
import time

from django.core.management.base import BaseCommand

from scheduling.schedules.materialize import schedules_materialize


class Command(BaseCommand):
    help = "Materialize due schedule occurrences until none are due (or for --seconds)."

    def add_arguments(self, parser):
        parser.add_argument("--seconds", type=float, default=0.0, help="poll this long (0: until idle)")
        parser.add_argument("--batch-size", type=int, default=None)
        parser.add_argument("--start-at", type=float, default=0.0, help="wait until this Unix time first")

    def handle(self, *args, seconds, batch_size, start_at, **opts):
        # --start-at lines several copies up on one instant (tests and benchmarks of concurrent runs).
        time.sleep(max(0.0, start_at - time.time()))
        deadline = time.monotonic() + seconds
        totals = {"batches": 0, "schedules": 0, "created": 0, "existing": 0, "ended": 0}
        while True:
            report = schedules_materialize(limit=batch_size)
            if report.schedules:
                totals["batches"] += 1
                for key in ("schedules", "created", "existing", "ended"):
                    totals[key] += getattr(report, key)
                self.stdout.write(
                    f"batch schedules={report.schedules} created={report.created} "
                    f"existing={report.existing} in {report.seconds * 1000:.1f} ms"
                )
                self.stdout.flush()
                continue
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        self.stdout.write("MATERIALIZE_DONE " + json.dumps(totals))
