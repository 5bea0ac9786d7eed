"""Our stores behind other agent SDKs' session interfaces; one module each, each needing its SDK.

- :mod:`agentsessions.integrations.openai_agents`: ``Session(session_id, store)``, the
  OpenAI Agents SDK's session protocol (``pip install agentsessions[openai-agents]``).
- :mod:`agentsessions.integrations.claude`: ``SessionStore(store)``, the Claude Agent
  SDK's session-store protocol (``pip install agentsessions[claude]``).

Every change they make is fenced by the store's claims, so two processes writing one
session at once lose nothing. Importing this package imports neither SDK.
"""
