"""The stores: each against its real server, the conformance suite, store URLs."""
