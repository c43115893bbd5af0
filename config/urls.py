from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from delivery import api as delivery_api
from delivery.guards import suppressions_api
from delivery.routing import api as routes_api
from inbound import api as inbound_api
from inbound import keywords_api
from inbound import webhook as inbound_webhook
from receipts import api as receipts_api
from reporting import views as observability
from retention import api as retention_api
from retention import erase_api, horizons_api
from scheduling.campaigns import api as cmp
from scheduling.campaigns import control_api as cmpctl
from scheduling.facade import api as facade_api
from scheduling.facade import numbers as facade_numbers
from scheduling.messages import api
from scheduling.schedules import api as sched
from smsgw.http import docs, health

urlpatterns = [
    path("v1/messages", api.MessagesApi.as_view(), name="messages"),
    path("v1/messages/batch", api.MessagesBatchApi.as_view(), name="messages-batch"),
    path("v1/messages/<str:public_id>", api.MessageDetailApi.as_view(), name="message-detail"),
    path("v1/messages/<str:public_id>/cancel", api.MessageCancelApi.as_view(), name="message-cancel"),
    path("v1/messages/<str:public_id>/events", api.MessageEventsApi.as_view(), name="message-events"),
    path("v1/messages/<str:public_id>/redact", erase_api.MessageRedactApi.as_view(), name="message-redact"),
    path("v1/recipients/erase", erase_api.RecipientEraseApi.as_view(), name="recipients-erase"),
    path("v1/schedules", sched.SchedulesApi.as_view(), name="schedules"),
    path("v1/schedules/<str:public_id>", sched.ScheduleDetailApi.as_view(), name="schedule-detail"),
    path("v1/schedules/<str:public_id>/pause", sched.SchedulePauseApi.as_view(), name="schedule-pause"),
    path("v1/schedules/<str:public_id>/resume", sched.ScheduleResumeApi.as_view(), name="schedule-resume"),
    path("v1/schedules/<str:public_id>/cancel", sched.ScheduleCancelApi.as_view(), name="schedule-cancel"),
    path(
        "v1/schedules/<str:public_id>/occurrences",
        sched.ScheduleOccurrencesApi.as_view(),
        name="schedule-occurrences",
    ),
    path(
        "v1/schedules/<str:public_id>/versions", sched.ScheduleVersionsApi.as_view(), name="schedule-versions"
    ),
    path(
        "v1/schedules/<str:public_id>/messages", sched.ScheduleMessagesApi.as_view(), name="schedule-messages"
    ),
    path("v1/campaigns", cmp.CampaignsApi.as_view(), name="campaigns"),
    path("v1/campaigns/<str:public_id>", cmp.CampaignDetailApi.as_view(), name="campaign-detail"),
    path(
        "v1/campaigns/<str:public_id>/messages", cmp.CampaignMessagesApi.as_view(), name="campaign-messages"
    ),
    path("v1/campaigns/<str:public_id>/errors", cmp.CampaignErrorsApi.as_view(), name="campaign-errors"),
    path("v1/campaigns/<str:public_id>/pause", cmpctl.CampaignPauseApi.as_view(), name="campaign-pause"),
    path("v1/campaigns/<str:public_id>/resume", cmpctl.CampaignResumeApi.as_view(), name="campaign-resume"),
    path("v1/campaigns/<str:public_id>/cancel", cmpctl.CampaignCancelApi.as_view(), name="campaign-cancel"),
    path("v1/quiet-hours", sched.QuietHoursApi.as_view(), name="quiet-hours"),
    path("v1/retention", horizons_api.RetentionApi.as_view(), name="retention"),
    path("v1/suppressions", suppressions_api.SuppressionsApi.as_view(), name="suppressions"),
    path("v1/keywords", keywords_api.KeywordsApi.as_view(), name="keywords"),
    path("v1/routes", routes_api.RoutesApi.as_view(), name="routes"),
    path("v1/routes/resolve", routes_api.RouteResolveApi.as_view(), name="routes-resolve"),
    path("v1/inbound", inbound_api.InboundListApi.as_view(), name="inbound-list"),
    path("v1/inbound/<str:public_id>", inbound_api.InboundDetailApi.as_view(), name="inbound-detail"),
    path("v1/conversations/<str:to>", inbound_api.ConversationApi.as_view(), name="conversation"),
    path("v1/exports", retention_api.ExportsApi.as_view(), name="exports"),
    path("v1/exports/<str:public_id>", retention_api.ExportDetailApi.as_view(), name="export-detail"),
    path(
        "v1/exports/<str:public_id>/download",
        retention_api.ExportDownloadApi.as_view(),
        name="export-download",
    ),
    path("v1/capacity", delivery_api.CapacityApi.as_view(), name="capacity"),
    path(
        "v1/capacity/senders/<str:sender>", delivery_api.SenderCapacityApi.as_view(), name="capacity-sender"
    ),
    path(
        "v1/openapi.json",
        SpectacularAPIView.as_view(authentication_classes=[], permission_classes=[]),
        {"format": "json"},
        name="openapi",
    ),
    path("v1/docs", docs.RedocView.as_view(), name="docs"),
    path("v1/docs/swagger", docs.SwaggerView.as_view(), name="docs-swagger"),
    *docs.asset_urlpatterns(),
    path("v1/webhook", receipts_api.WebhookConfigApi.as_view(), name="webhook-config"),
    path("v1/webhook-deliveries", receipts_api.WebhookDeliveriesApi.as_view(), name="webhook-deliveries"),
    path(
        "v1/webhook-deliveries/<str:webhook_id>/replay",
        receipts_api.WebhookReplayApi.as_view(),
        name="webhook-replay",
    ),
    path("receipts/<str:provider>/", receipts_api.status_callback, name="receipts"),
    path("inbound/<str:provider>/", inbound_webhook.inbound_message, name="inbound"),
    # The Twilio-compatible Messages API (docs/coming-from-twilio.md): the official SDKs' paths.
    path("2010-04-01/Accounts/<str:account_sid>/Messages.json", facade_api.messages, name="facade-messages"),
    path(
        "2010-04-01/Accounts/<str:account_sid>/Messages/<str:sid>.json",
        facade_api.message,
        name="facade-message",
    ),
    path(
        "2010-04-01/Accounts/<str:account_sid>/IncomingPhoneNumbers.json",
        facade_numbers.incoming_numbers,
        name="facade-numbers",
    ),
    path(
        "2010-04-01/Accounts/<str:account_sid>/IncomingPhoneNumbers/<str:sid>.json",
        facade_numbers.incoming_number,
        name="facade-number",
    ),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", observability.metrics, name="metrics"),
    path("admin/", admin.site.urls),
]

# A database that does not answer is a 503 with Retry-After, wherever it was needed (smsgw.http.unavailable).
handler500 = "smsgw.http.unavailable.server_error"
