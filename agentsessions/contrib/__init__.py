"""Glue for web frameworks: one module each, each needing its framework.

- :mod:`agentsessions.contrib.django`: ``store(alias="default")``, a store over a Django
  project's own ``DATABASES`` (``pip install agentsessions[django]``).
"""
