"""``python -m bench <scenario> ...``: the benchmarks' entry point, beside them and outside the app
packages (no app module imports bench). Needs PostgreSQL and a real broker (DATABASE_URL,
CELERY_BROKER_URL); prints figures, asserts nothing. ``python -m bench --help`` lists the scenarios."""

import os
import sys

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from bench.command import Command

    Command().run_from_argv(["python -m", "bench", *sys.argv[1:]])


if __name__ == "__main__":
    main()
