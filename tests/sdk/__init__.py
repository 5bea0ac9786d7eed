"""The OpenAI Agents SDK's and the Claude Agent SDK's own session tests, run on every agentsessions store."""
