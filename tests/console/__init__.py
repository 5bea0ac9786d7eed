"""The web console: over HTTP, and in a headless browser."""
