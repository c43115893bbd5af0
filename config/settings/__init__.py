"""Settings, all from the environment, split by concern; each module reads its own variables. With nothing
set, the embedded defaults apply: SQLite (WAL) in ``.var/``, kombu's filesystem transport as the broker,
and the sandbox providers on 127.0.0.1.

Django reads this package (DJANGO_SETTINGS_MODULE=config.settings); the modules are imported in the order
below, each taking what it needs from the ones before by name.
"""

from config.settings.broker import *  # noqa: F403
from config.settings.database import *  # noqa: F403
from config.settings.environment import *  # noqa: F403
from config.settings.guards import *  # noqa: F403
from config.settings.inbound import *  # noqa: F403
from config.settings.jobs import *  # noqa: F403
from config.settings.limits import *  # noqa: F403
from config.settings.logging import *  # noqa: F403
from config.settings.observability import *  # noqa: F403
from config.settings.pipeline import *  # noqa: F403
from config.settings.providers import *  # noqa: F403
from config.settings.receipts import *  # noqa: F403
from config.settings.retention import *  # noqa: F403
from config.settings.tracing import *  # noqa: F403
from config.settings.web import *  # noqa: F403
