"""The endpoints over real HTTP sockets: the fake provider servers and the official SDKs' recordings."""
