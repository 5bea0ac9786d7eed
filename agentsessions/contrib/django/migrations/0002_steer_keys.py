"""Steer keys (``session.steer(text, key=...)``): their table in a database the first migration made before them.

MySQL/MariaDB: the store's ``SCHEMA`` run again, which adds ``agentsessions_steer_keys``
(every statement is ``CREATE ... IF NOT EXISTS`` or ``INSERT IGNORE``, so nothing else
changes). PostgreSQL and SQLite record their schema's version and are brought up to date
their own way (``agentsessions migrate --store URL``; SQLite on open), so nothing runs there.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def add_steer_keys(apps: Any, schema_editor: Any) -> None:
    """On MySQL/MariaDB, run ``mysql.SCHEMA`` again: it creates the steer keys' table if missing."""
    connection = schema_editor.connection
    if connection.vendor == "mysql":
        from agentsessions.stores import mysql

        with connection.cursor() as cursor:
            for statement in mysql.SCHEMA:
                cursor.execute(statement)


class Migration(migrations.Migration):
    """Adds the steer keys' table on MySQL/MariaDB; unapplying it leaves the table."""

    dependencies: ClassVar[list[tuple[str, str]]] = [("agentsessions", "0001_initial")]
    operations: ClassVar[list[Any]] = [migrations.RunPython(add_steer_keys, migrations.RunPython.noop, elidable=False)]
