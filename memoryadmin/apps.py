from django.apps import AppConfig


class MemoryAdminConfig(AppConfig):
    name = "memoryadmin"
    verbose_name = "Agents' front door"
