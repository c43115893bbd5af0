from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Receipts and tenant webhooks"
    # Its webhook outbox listens to every status change, and its intake takes the reconciler's found
    # copies: both handed over by the composition root (config.wiring).
