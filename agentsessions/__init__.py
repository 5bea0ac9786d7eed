"""agentsessions: tool-using agents whose conversations outlive the process that started them.

    import agentsessions as agent

    store = agent.stores.sqlite.open("sessions.db")       # or memory, postgres, mysql, mongodb
    session = agent.open("conversation-1", store)
    result = agent.Runner().run(agent.Spec(session=session, tools=[...]), messages, endpoint)

Importing this package imports no database driver and no store module.
"""

from agentsessions.codec import FORMAT_VERSION, dumps, loads
from agentsessions.endpoint import Endpoint, ModelRequest, ModelResponse, Usage
from agentsessions.errors import (
    AgentSessionsError,
    EndpointError,
    FormatError,
    InvalidSessionIdError,
    RunError,
    RunFinishedError,
    SchemaMissingError,
    StoreError,
)
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.runner import Pattern, Result, Run, Runner, Spec, StopReason
from agentsessions.session import Session, Store, StoreSession, open
from agentsessions.tools import Tool, tool

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "AgentSessionsError",
    "Content",
    "ContentType",
    "Endpoint",
    "EndpointError",
    "FormatError",
    "InvalidSessionIdError",
    "Message",
    "ModelRequest",
    "ModelResponse",
    "Pattern",
    "Result",
    "Role",
    "Run",
    "RunError",
    "RunFinishedError",
    "Runner",
    "SchemaMissingError",
    "Session",
    "Spec",
    "StopReason",
    "Store",
    "StoreError",
    "StoreSession",
    "Tool",
    "Usage",
    "dumps",
    "loads",
    "open",
    "tool",
]
