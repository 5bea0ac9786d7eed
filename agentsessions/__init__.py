"""agentsessions: tool-using agents whose conversations outlive the process that started them.

    import agentsessions as agent

    store = agent.stores.sqlite.open("sessions.db")       # or memory, postgres, mysql, mongodb
    session = agent.open("conversation-1", store)
    result = agent.Runner().run(agent.Spec(session=session, tools=[...]), messages, endpoint)

Importing this package imports no database driver and no store module.
"""

from agentsessions.approvals import Approval, ApprovalStore, Decision
from agentsessions.codec import FORMAT_VERSION, dumps, loads
from agentsessions.compaction import Compaction
from agentsessions.endpoint import Endpoint, ModelRequest, ModelResponse, Usage
from agentsessions.errors import (
    AgentSessionsError,
    ApprovalPendingError,
    ConflictError,
    DecryptionError,
    EndpointDecodingError,
    EndpointError,
    EndpointStatusError,
    EndpointTimeoutError,
    EndpointTransportError,
    FormatError,
    InvalidArgumentsError,
    InvalidSessionIdError,
    RunError,
    RunFinishedError,
    RunnerClosedError,
    SchemaMissingError,
    SchemaTooNewError,
    SessionBusyError,
    StoreError,
)
from agentsessions.messages import Content, ContentType, Message, Role
from agentsessions.runner import Run, Runner
from agentsessions.runs import RunState, SessionInfo
from agentsessions.session import ForkStore, MetadataStore, PruneStore, RunStore, Session, Store, StoreSession, open
from agentsessions.spec import Pattern, Result, Resume, Spec, StopReason
from agentsessions.tools import Tool, tool

__version__ = "0.1.0"

__all__ = [
    "FORMAT_VERSION",
    "AgentSessionsError",
    "Approval",
    "ApprovalPendingError",
    "ApprovalStore",
    "Compaction",
    "ConflictError",
    "Content",
    "ContentType",
    "Decision",
    "DecryptionError",
    "Endpoint",
    "EndpointDecodingError",
    "EndpointError",
    "EndpointStatusError",
    "EndpointTimeoutError",
    "EndpointTransportError",
    "ForkStore",
    "FormatError",
    "InvalidArgumentsError",
    "InvalidSessionIdError",
    "Message",
    "MetadataStore",
    "ModelRequest",
    "ModelResponse",
    "Pattern",
    "PruneStore",
    "Result",
    "Resume",
    "Role",
    "Run",
    "RunError",
    "RunFinishedError",
    "RunState",
    "RunStore",
    "Runner",
    "RunnerClosedError",
    "SchemaMissingError",
    "SchemaTooNewError",
    "Session",
    "SessionBusyError",
    "SessionInfo",
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
