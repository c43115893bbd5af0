"""Write (or check) docs/settings.md, the settings reference made from the code (smsgw.config.reference)."""

from django.core.management.base import BaseCommand, CommandError

from smsgw.config import reference


class Command(BaseCommand):
    help = (
        "Print the settings reference made from the code; --write saves docs/settings.md, --check compares."
    )

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--write", action="store_true", help="write docs/settings.md")
        group.add_argument(
            "--check", action="store_true", help="fail when docs/settings.md differs from the code"
        )

    def handle(self, *args, write: bool, check: bool, **options):
        try:
            page = reference.render()
        except reference.ScanError as exc:
            raise CommandError(str(exc)) from None
        if write:
            reference.PAGE.write_text(page)
            self.stdout.write(f"wrote {reference.PAGE.relative_to(reference.ROOT)}")
        elif check:
            if not reference.PAGE.exists() or reference.PAGE.read_text() != page:
                raise CommandError(
                    "docs/settings.md differs from the code: run `manage.py settings_reference --write`"
                )
        else:
            self.stdout.write(page, ending="")
