from django.apps import AppConfig


class ConfigConfig(AppConfig):
    """The composition root as an app: the last one loaded, so every app is ready when it wires them."""

    name = "config"
    label = "wiring"
    verbose_name = "Wiring: the stages' hand-offs and the operator console"

    def ready(self) -> None:
        from config.wiring import stages_install

        stages_install()
