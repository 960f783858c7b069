from django.apps import AppConfig


class MemoryAdminConfig(AppConfig):
    name = "memoryadmin"
    verbose_name = "Agents' front door"

    def ready(self) -> None:
        from . import logging_utils

        logging_utils.connect()  # structured log lines for extraction runs and curation
