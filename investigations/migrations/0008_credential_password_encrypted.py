"""Source passwords encrypted at rest: the column becomes text, every stored password is encrypted in
place, then the field reads and writes through investigations.crypto (Fernet)."""

from django.db import migrations, models

import investigations.crypto


def _encrypt_all(apps, schema_editor):
    # The historical field here is a plain TextField: it reads the clear text and stores what it is given.
    Credential = apps.get_model("investigations", "DataSourceCredential")
    for cred in Credential.objects.exclude(password=""):
        cred.password = investigations.crypto.encrypt(cred.password)
        cred.save(update_fields=["password"])


def _decrypt_all(apps, schema_editor):
    Credential = apps.get_model("investigations", "DataSourceCredential")
    for cred in Credential.objects.exclude(password=""):
        cred.password = investigations.crypto.decrypt(cred.password)
        cred.save(update_fields=["password"])


class Migration(migrations.Migration):
    dependencies = [
        ("investigations", "0007_run_attempt"),
    ]

    operations = [
        migrations.AlterField(
            model_name="datasourcecredential", name="password", field=models.TextField(blank=True)
        ),
        migrations.RunPython(_encrypt_all, _decrypt_all),
        migrations.AlterField(
            model_name="datasourcecredential",
            name="password",
            field=investigations.crypto.EncryptedTextField(blank=True),
        ),
    ]
