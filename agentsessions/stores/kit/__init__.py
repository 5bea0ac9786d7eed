"""What the library's stores share, public for anyone writing a store.

- :mod:`agentsessions.stores.kit.incremental`: saves that write only what is new
  (``plan_save`` compares a transcript with what this store object last saw).
- :mod:`agentsessions.stores.kit.failures`: ``could_not``, the one wording of a store's
  failures.
- :mod:`agentsessions.stores.kit.schema`: schema versions (``check_version``, the rule every
  store applies to the version it finds) and migrations (``Step``, ``plan``, the ``Migrator``
  that ``agentsessions migrate`` drives).
"""
