from __future__ import annotations

import pytest


@pytest.fixture
def export_storage(settings, tmp_path):
    """The export storage: a folder of this test's own."""
    settings.STORAGES = {
        **settings.STORAGES,
        "exports": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "exports")},
        },
    }
    return tmp_path / "exports"
