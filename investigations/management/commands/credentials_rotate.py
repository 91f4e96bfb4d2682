"""Re-encrypt every stored source password with the first credentials key (see investigations/crypto.py)."""

from __future__ import annotations

from typing import Any

from cryptography.fernet import InvalidToken
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from investigations import crypto

_TABLE = "investigations_datasourcecredential"


class Command(BaseCommand):
    help = "Re-encrypt the stored source passwords with the first key, after a key was added in front."

    def handle(self, *args: Any, **options: Any) -> None:
        done, failed = 0, []
        # Raw rows: the model field would decrypt, and a row no key opens would read as "".
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT id, password FROM {_TABLE} WHERE password <> ''")  # noqa: S608
            for pk, token in cursor.fetchall():
                try:
                    fresh = crypto.rotate(token)
                except InvalidToken:
                    failed.append(pk)
                    continue
                cursor.execute(f"UPDATE {_TABLE} SET password = %s WHERE id = %s", [fresh, pk])  # noqa: S608
                done += 1
        self.stdout.write(f"{done} credential(s) re-encrypted with the first key")
        if failed:
            raise CommandError(
                f"{len(failed)} credential(s) open with none of the configured keys (ids {failed}): "
                "store them again on the Data sources page"
            )
