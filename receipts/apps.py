from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Receipts and tenant webhooks"

    def ready(self) -> None:
        from receipts.webhooks import webhook_outbox_enqueue
        from scheduling.lifecycle.transitions import status_listener_register

        status_listener_register(webhook_outbox_enqueue)
