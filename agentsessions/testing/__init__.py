"""What a store author tests with: :mod:`agentsessions.testing.storetest`, the conformance suite.

Importing it needs Hypothesis (``pip install agentsessions[storetest]``); nothing else here
imports a driver or a test server.
"""
