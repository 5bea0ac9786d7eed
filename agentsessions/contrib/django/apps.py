"""The Django app: in ``INSTALLED_APPS``, ``manage.py migrate`` creates the store's tables."""

from __future__ import annotations

from django.apps import AppConfig


class AgentSessionsConfig(AppConfig):
    """``"agentsessions.contrib.django"`` in ``INSTALLED_APPS``: the store's tables come with ``migrate``."""

    name = "agentsessions.contrib.django"
    label = "agentsessions"
    verbose_name = "agentsessions"
