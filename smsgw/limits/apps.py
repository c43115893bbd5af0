from django.apps import AppConfig


class LimitsConfig(AppConfig):
    name = "smsgw.limits"
    label = "limits"
    verbose_name = "Tenant limits: quotas and API rate limits"

    def ready(self) -> None:
        # The quota gate is listed, last, in scheduling.dispatch.release.RELEASE_GATES. The listener gives
        # back
        # the booking of a message that ends before it was submitted.
        from scheduling.lifecycle.transitions import status_listener_register
        from smsgw.limits.execution import quota_release_listener

        status_listener_register(quota_release_listener)
