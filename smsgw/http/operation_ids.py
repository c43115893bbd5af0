"""The operationId of every /v1 operation, written out: a generated client names its functions after them
(``sendMessage``, ``listMessageEvents``), so they must not change when a view is renamed, moved or split,
as drf-spectacular's generated ids (``messages_events_retrieve``) would.

The names are camelCase verb + noun: ``list`` a page or a collection, ``get`` one object or a tenant's
setting, ``create``/``send``/``add`` a new one, ``update`` (PATCH), ``set`` (PUT), ``delete``/``remove``,
and the action's own verb (``cancelMessage``, ``replayWebhookDelivery``). Keyed by the schema's path and
method; ``smsgw.http.schema.ApiAutoSchema.get_operation_id`` reads it, and an operation missing here keeps
its generated id with a warning (which fails ``spectacular --fail-on-warn``).
tests/smsgw/http/test_operation_ids.py checks that every operation has one and that none is used twice.
Renaming one is a breaking change for generated clients (docs/api.md, "Generated clients")."""

from __future__ import annotations

OPERATION_IDS: dict[tuple[str, str], str] = {
    ("/v1/campaigns", "GET"): "listCampaigns",
    ("/v1/campaigns", "POST"): "createCampaign",
    ("/v1/campaigns/{public_id}", "GET"): "getCampaign",
    ("/v1/campaigns/{public_id}/cancel", "POST"): "cancelCampaign",
    ("/v1/campaigns/{public_id}/errors", "GET"): "listCampaignErrors",
    ("/v1/campaigns/{public_id}/messages", "GET"): "listCampaignMessages",
    ("/v1/campaigns/{public_id}/pause", "POST"): "pauseCampaign",
    ("/v1/campaigns/{public_id}/resume", "POST"): "resumeCampaign",
    ("/v1/capacity", "GET"): "getCapacity",
    ("/v1/capacity/senders/{sender}", "PUT"): "setSenderCapacity",
    ("/v1/capacity/senders/{sender}", "DELETE"): "deleteSenderCapacity",
    ("/v1/conversations/{to}", "GET"): "getConversation",
    ("/v1/exports", "GET"): "listExports",
    ("/v1/exports/{public_id}", "GET"): "getExport",
    ("/v1/exports/{public_id}/download", "GET"): "downloadExport",
    ("/v1/inbound", "GET"): "listInbound",
    ("/v1/inbound/{public_id}", "GET"): "getInbound",
    ("/v1/keywords", "GET"): "getKeywords",
    ("/v1/keywords", "PUT"): "setKeywords",
    ("/v1/messages", "GET"): "listMessages",
    ("/v1/messages", "POST"): "sendMessage",
    ("/v1/messages/{public_id}", "GET"): "getMessage",
    ("/v1/messages/{public_id}", "PATCH"): "updateMessage",
    ("/v1/messages/{public_id}/cancel", "POST"): "cancelMessage",
    ("/v1/messages/{public_id}/events", "GET"): "listMessageEvents",
    ("/v1/messages/{public_id}/redact", "POST"): "redactMessage",
    ("/v1/messages/batch", "POST"): "sendMessageBatch",
    ("/v1/quiet-hours", "GET"): "getQuietHours",
    ("/v1/quiet-hours", "PUT"): "setQuietHours",
    ("/v1/quiet-hours", "DELETE"): "deleteQuietHours",
    ("/v1/recipients/erase", "POST"): "eraseRecipient",
    ("/v1/retention", "GET"): "getRetention",
    ("/v1/retention", "PUT"): "setRetention",
    ("/v1/routes", "GET"): "listRoutes",
    ("/v1/routes/resolve", "GET"): "resolveRoute",
    ("/v1/schedules", "GET"): "listSchedules",
    ("/v1/schedules", "POST"): "createSchedule",
    ("/v1/schedules/{public_id}", "GET"): "getSchedule",
    ("/v1/schedules/{public_id}", "PATCH"): "updateSchedule",
    ("/v1/schedules/{public_id}/cancel", "POST"): "cancelSchedule",
    ("/v1/schedules/{public_id}/messages", "GET"): "listScheduleMessages",
    ("/v1/schedules/{public_id}/occurrences", "GET"): "listScheduleOccurrences",
    ("/v1/schedules/{public_id}/pause", "POST"): "pauseSchedule",
    ("/v1/schedules/{public_id}/resume", "POST"): "resumeSchedule",
    ("/v1/schedules/{public_id}/versions", "GET"): "listScheduleVersions",
    ("/v1/suppressions", "GET"): "listSuppressions",
    ("/v1/suppressions", "POST"): "addSuppression",
    ("/v1/suppressions", "DELETE"): "removeSuppression",
    ("/v1/webhook", "GET"): "getWebhook",
    ("/v1/webhook", "PUT"): "setWebhook",
    ("/v1/webhook", "DELETE"): "deleteWebhook",
    ("/v1/webhook-deliveries", "GET"): "listWebhookDeliveries",
    ("/v1/webhook-deliveries/{webhook_id}/replay", "POST"): "replayWebhookDelivery",
}
