"""What many test modules share: server settings, scratch stores, scripted models, waiting, process plumbing."""
