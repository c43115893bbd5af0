import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# A host missing a setting the web role needs stops here (smsgw.runtime.roles), before serving anything.
from smsgw.runtime import roles  # noqa: E402  (after the settings are configured)

roles.check_web()
