"""Stores: where sessions live. One module or package each; import the one you use.

``memory`` and ``sqlite`` need nothing beyond the standard library; ``postgres``,
``mysql``, ``mongodb`` and ``redis`` need their driver (``pip install agentsessions[postgres]``...);
each of those four is a package holding its private helpers. What several stores share is
:mod:`agentsessions.stores.kit`.
:func:`from_url` opens any of them from a URL (see :mod:`agentsessions.stores.urls`).
The conformance suite every store passes is :mod:`agentsessions.testing.storetest`.

Writing a store of your own
---------------------------

Implement, as plain methods of one class (no base class to inherit):

- :class:`agentsessions.Store`, the seed's four methods (``save``, ``messages``,
  ``add_steer``, ``take_steers``). That is enough for runs to use it, without claims,
  leases or fencing.
- :class:`agentsessions.RunStore` on top, so the store holds runs: ``info``, ``sessions``,
  ``delete``, ``cancel``, ``claim``, ``peek_steers``, ``save_run``, ``renew``, and
  ``add_steer`` returning the :class:`~agentsessions.RunState`. The runner then claims
  sessions, keeps leases and saves under fencing tokens.
- :class:`agentsessions.ForkStore`, one method (``fork``), for ``session.fork``.

``memory.py`` is the smallest complete example of all three, with no database in the way;
read it first. Then reuse what the library's stores share:

- the kit, :mod:`agentsessions.stores.kit`: ``incremental`` for saves that write only
  what is new, ``failures`` to turn a driver's exceptions into the library's errors,
  worded as the other stores', ``listing`` for ``sessions()`` in keyset pages, and
  ``values`` for the text and times a record reads back as;
- :mod:`agentsessions.runs` for the record (``derive_state`` turns a stored state and a
  lease into a ``RunState``; ``busy`` and ``superseded`` build the two conflict errors;
  ``state_filter``, ``check_updated_before`` and ``check_lease`` check arguments;
  ``listed`` leaves a record a newer version wrote out of a listing instead of ending it);
- ``check_session_id``, ``check_steer`` and ``check_fork_at`` from :mod:`agentsessions.session`;
- the codec's ``dump_message``/``load_message`` (one row per message) and
  ``encode_text``/``decode_text`` (ids and steers as bytes, any ``str`` verbatim).

Steer numbers come from one counter per store (never reset by ``delete``), as fencing
tokens do; times from one clock (the database's, where it has one).

Then prove it in your own tests, one pytest test per property::

    import pytest

    from agentsessions.testing import storetest

    @pytest.mark.parametrize("name", storetest.properties())
    def test_my_store_keeps_the_contract(name):
        report = storetest.check(name, lambda: MyStore(...))
        assert not report.skipped  # the store has every capability the property checks

``storetest`` detects which protocols the store implements and checks exactly those:
the seed's properties always (verbatim strings, isolated ids, atomic saves, steers
exactly once, a model-based state machine), the run properties for a ``RunStore``
(state transitions against a model, leases and takeover, fencing tokens across delete,
listing pages, delete, no orphaned steers at release, steers across a crash, cancel),
and the fork property for a ``ForkStore``. What it skipped is in ``Report.skipped``.
"""

from agentsessions.stores.urls import from_url

__all__ = ["from_url"]
