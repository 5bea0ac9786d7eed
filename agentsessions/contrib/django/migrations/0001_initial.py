"""The store's tables, in the database being migrated: the schema the store module exports, run as it is."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def create_tables(apps: Any, schema_editor: Any) -> None:
    """Run the store's schema (every statement is ``CREATE ... IF NOT EXISTS``: safe on tables made by hand)."""
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        from agentsessions.stores import postgres

        with connection.cursor() as cursor:
            cursor.execute(postgres.SCHEMA)
    elif connection.vendor == "mysql":
        from agentsessions.stores import mysql

        with connection.cursor() as cursor:
            for statement in mysql.SCHEMA:
                cursor.execute(statement)
    elif connection.vendor == "sqlite":
        from agentsessions.stores import sqlite

        sqlite.open(connection.settings_dict["NAME"]).close()  # the SQLite store makes its own tables


class Migration(migrations.Migration):
    """Creates the tables; unapplying it leaves them (the sessions in them are not Django's to drop)."""

    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [migrations.RunPython(create_tables, migrations.RunPython.noop, elidable=False)]
