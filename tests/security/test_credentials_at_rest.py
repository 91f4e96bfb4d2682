"""Issue 12, credentials apart: a URL source's password is encrypted at rest (Fernet). The column never
holds it; a database migrated from clear-text rows is encrypted in place; keys rotate; the admin never
shows it; a key that cannot open a row reads as empty instead of failing the page."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from investigations import crypto
from investigations.models import DataSource, DataSourceCredential

pytestmark = pytest.mark.django_db(transaction=True)

CLEAR = "pa55-w0rd-9911"


def _column(pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT password FROM investigations_datasourcecredential WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def _credential() -> DataSourceCredential:
    ds = DataSource.objects.create(kind="url", address="http://127.0.0.1:9091")
    return DataSourceCredential.objects.create(datasource=ds, username="bob", password=CLEAR)


def test_the_column_holds_a_token_and_the_model_the_password() -> None:
    cred = _credential()
    assert CLEAR not in _column(cred.pk)
    assert DataSourceCredential.objects.get(pk=cred.pk).password == CLEAR


def test_the_migration_encrypts_rows_stored_in_clear() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("investigations", "0007_run_attempt")])
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO investigations_datasource (kind, address, tunnel, state, state_detail, served_url, "
            "discovery_status, discovery, discovery_error, created) "
            "VALUES ('url', 'http://127.0.0.1:9092', '{}', 'unknown', '', '', '', '{}', '', CURRENT_TIMESTAMP) "
            "RETURNING id"
        )
        ds_id = cursor.fetchone()[0]
        cursor.execute(
            "INSERT INTO investigations_datasourcecredential (datasource_id, username, password) "
            "VALUES (%s, 'carol', %s) RETURNING id",
            [ds_id, CLEAR],
        )
        pk = cursor.fetchone()[0]
    assert _column(pk) == CLEAR
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert CLEAR not in _column(pk)
    assert DataSourceCredential.objects.get(pk=pk).password == CLEAR


def test_rotation_reencrypts_every_row_with_the_first_key(settings) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.STEPWISE_CREDENTIALS_KEY = [old]
    cred = _credential()
    before = _column(cred.pk)
    settings.STEPWISE_CREDENTIALS_KEY = [new, old]
    call_command("credentials_rotate")
    after = _column(cred.pk)
    assert after != before and Fernet(new.encode()).decrypt(after.encode()).decode() == CLEAR
    settings.STEPWISE_CREDENTIALS_KEY = [new]  # the old key is gone: the row still opens
    assert DataSourceCredential.objects.get(pk=cred.pk).password == CLEAR


def test_a_row_no_key_opens_reads_as_empty_and_is_logged(settings, caplog) -> None:
    cred = _credential()
    settings.STEPWISE_CREDENTIALS_KEY = [Fernet.generate_key().decode()]
    assert DataSourceCredential.objects.get(pk=cred.pk).password == ""
    assert "cannot be decrypted" in caplog.text


def test_without_a_configured_key_the_key_comes_from_the_secret_key(settings) -> None:
    settings.STEPWISE_CREDENTIALS_KEY = []
    cred = _credential()
    token = _column(cred.pk)
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "another-secret-key-of-at-least-32-characters"
    assert crypto.decrypt(token) == CLEAR  # the old SECRET_KEY as a fallback still opens it
    settings.SECRET_KEY_FALLBACKS = []
    assert crypto.decrypt(token) == ""


def test_the_admin_never_shows_the_password(admin_client) -> None:
    cred = _credential()
    for url in (
        reverse("admin:investigations_datasourcecredential_change", args=[cred.pk]),
        reverse("admin:investigations_datasourcecredential_changelist"),
    ):
        body = admin_client.get(url).content.decode()
        assert CLEAR not in body and _column(cred.pk) not in body and "bob" in body
