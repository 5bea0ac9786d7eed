"""Kept so its documented path works: the module is :mod:`agentsessions.stores.kit.incremental`."""

from agentsessions.stores.kit.incremental import Known, KnownSessions, SavePlan, new_revision, plan_save

__all__ = ["Known", "KnownSessions", "SavePlan", "new_revision", "plan_save"]
