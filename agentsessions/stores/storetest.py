"""Deprecated: the conformance suite is :mod:`agentsessions.testing.storetest` now.

This module re-exports it, with a ``DeprecationWarning`` when imported.
"""

from __future__ import annotations

import warnings

from agentsessions.testing.storetest import *  # noqa: F403
from agentsessions.testing.storetest import __all__  # noqa: F401

warnings.warn(
    "agentsessions.stores.storetest moved to agentsessions.testing.storetest; import it from there",
    DeprecationWarning,
    stacklevel=2,
)
