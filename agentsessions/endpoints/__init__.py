"""Models the runner can talk to: ``ScriptedEndpoint`` offline, and real providers."""

from agentsessions.endpoints.scripted import ScriptedEndpoint
from agentsessions.errors import EndpointError

__all__ = ["EndpointError", "ScriptedEndpoint"]
