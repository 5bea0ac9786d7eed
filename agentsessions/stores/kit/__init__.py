"""The kit: what the library's stores share, public for anyone writing a store.

Each module is one concern the stores would otherwise each write again:

- :mod:`agentsessions.stores.kit.incremental`: saves that write only what is new
  (``plan_save`` compares a transcript with what this store object last saw: keep the
  ``shared`` prefix, write the rest; ``KnownSessions`` remembers it, a run's session for as
  long as the run holds its claim; ``SavePlan.rows_to_keep`` compares the stored rows with
  the new transcript for a session it does not remember; ``new_revision``).
- :mod:`agentsessions.stores.kit.failures`: a driver's failures as the library's errors
  (``translated`` around driver calls; ``could_not``, the one wording; ``first_line``).
- :mod:`agentsessions.stores.kit.listing`: ``sessions()`` in keyset pages (``pages``
  runs the page loop around a store's own query).
- :mod:`agentsessions.stores.kit.schema`: schema versions (``check_version``, the rule every
  store applies to the version it finds) and migrations (``Step``, ``plan``, the ``Migrator``
  that ``agentsessions migrate`` drives).
- :mod:`agentsessions.stores.kit.values`: what a record's values read back as (``text``
  from bytes; ``utc``, ``micros``, ``moment`` and ``span`` for the database's times).
- :mod:`agentsessions.stores.kit.arguments`: the arguments of ``add_steer``, ``claim``,
  ``save_run`` and ``renew``, checked before any I/O (a ``TypeError`` or ``ValueError``
  naming the argument).
- :mod:`agentsessions.stores.kit.steerkeys`: idempotent steers (``digest`` of a steer's
  text, kept beside its key; ``conflict``, the error for a key reused with another text).
- :mod:`agentsessions.stores.kit.prune`: ``store.prune(...)``'s arguments (``check_prune``)
  and which sessions it may delete (``PruneFilter.matches``, asked in the deleting step).
- :mod:`agentsessions.stores.kit.summary`: what a record says of its transcript for a
  listing (``preview`` of the last text; ``fold_usage`` and ``stored_usage``, the runs' token
  totals kept in the save's own write).
- :mod:`agentsessions.stores.kit.busy`: ``add_steer(..., if_busy=...)``, what a steer does
  when a live run holds its session (``after_token``, ``interrupts``), decided in the step
  that adds it.

The record itself, its states and the checks of single values (ids, steers, leases, ends)
are in :mod:`agentsessions.runs` and :mod:`agentsessions.session`; the encoding of
messages, ids and steers in :mod:`agentsessions.codec`.
"""
