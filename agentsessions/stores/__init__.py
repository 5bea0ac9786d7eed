"""Stores: where sessions live. One module each; import the one you use.

``memory`` and ``sqlite`` need nothing beyond the standard library; ``postgres``,
``mysql`` and ``mongodb`` need their driver (``pip install agentsessions[postgres]``...).
``storetest`` is the conformance suite every store passes.
"""
