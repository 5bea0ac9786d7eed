"""The test suite, a package: helpers in ``tests.support`` (the fake provider servers: ``agentsessions.testing``)."""
