"""Local HTTP servers that speak the providers' wire formats (Messages, Chat Completions, Responses)."""
