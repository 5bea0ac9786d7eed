"""Kept so its documented path works: the module is :mod:`agentsessions.stores.kit.failures`."""

from agentsessions.stores.kit.failures import could_not

__all__ = ["could_not"]
