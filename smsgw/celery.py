import os

from celery import Celery
from celery.signals import after_setup_logger

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smsgw.settings")

app = Celery("smsgw")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@after_setup_logger.connect
def _quiet_logs(logger=None, **_kwargs) -> None:
    """Workers and beat: a repeated error once per window, and no INFO line per periodic tick."""
    from smsgw.logs import handlers_quiet

    handlers_quiet(logger)
