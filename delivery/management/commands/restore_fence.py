"""After a database restore, before any worker or beat starts: every message that could have left the
gateway since the backup must prove its absence at the provider before it is sent (delivery.sending.fence,
docs/restore.md)."""

import getpass

from django.core.management.base import BaseCommand, CommandError

from delivery.sending.fence import FENCE_BATCH_SIZE, FenceRefused, messages_fence, since_parse


class Command(BaseCommand):
    help = (
        "Run after restoring a database backup and before starting workers or beat: every message that "
        "could have been sent since the backup time is looked up at the provider before it may be sent."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since",
            required=True,
            help="the backup's point in time, ISO 8601 with its UTC offset (e.g. 2026-12-05T12:00:00Z): "
            "a pg_dump's start, a base backup's recovery_target_time; when unsure, earlier is safe",
        )
        parser.add_argument(
            "--actor", default="", help="who runs it, for the timeline (default: the OS user)"
        )
        parser.add_argument(
            "--batch-size", type=int, default=FENCE_BATCH_SIZE, help="messages per transaction"
        )

    def handle(self, *args, **opts):
        if opts["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            since = since_parse(opts["since"])
        except FenceRefused as exc:
            raise CommandError(str(exc)) from exc
        actor = f"operator:{opts['actor'] or _os_user()}"[:64]
        report = messages_fence(since=since, actor=actor, batch_size=opts["batch_size"])
        fenced = ", ".join(f"{status} {n}" for status, n in report.fenced.items())
        self.stdout.write(
            f"restore fence since {report.since.isoformat()} by {actor}: fenced {report.total} ({fenced}); "
            f"already fenced {report.already_fenced}; changed meanwhile {report.moved_meanwhile}; "
            f"scheduled and left alone (due later, or waiting for a person) {report.not_due}; "
            f"{report.batches} batches"
        )
        if report.moved_meanwhile:
            self.stderr.write(
                "some messages changed while the fence ran: is a worker or beat still running? Stop them "
                "and run the fence again (it skips what it already fenced)."
            )


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container without a passwd entry or USER
        return "unknown"
