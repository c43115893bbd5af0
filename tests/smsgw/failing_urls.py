"""Test-only URLconf: the real routes plus views that raise, to see what a 500 looks like on the API, on
the receipt endpoint and elsewhere (tests/smsgw/test_hostile_input.py, tests/smsgw/test_log_redaction.py)."""

from django.urls import path

from smsgw.urls import urlpatterns as real_urlpatterns


def boom(request):
    raise RuntimeError("deliberate failure in a test view")


urlpatterns = [
    path("v1/_test/boom", boom),
    path("receipts/_test/boom/", boom),
    path("elsewhere/_test/boom", boom),
    *real_urlpatterns,
]
