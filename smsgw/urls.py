from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from scheduling import api
from smsgw import health

urlpatterns = [
    path("v1/messages", api.MessagesApi.as_view(), name="messages"),
    path("v1/messages/<str:public_id>", api.MessageDetailApi.as_view(), name="message-detail"),
    path("v1/messages/<str:public_id>/cancel", api.MessageCancelApi.as_view(), name="message-cancel"),
    path("v1/messages/<str:public_id>/events", api.MessageEventsApi.as_view(), name="message-events"),
    path(
        "v1/openapi.json",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]),
        {"format": "json"},
        name="openapi",
    ),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
]
