"""The database table of the shared cache (settings.CACHES without REDIS_URL): timeline contexts and
panel results, shared by every web process and worker."""

from django.core.management import call_command
from django.db import migrations


def create_cache_table(apps, schema_editor) -> None:
    # A no-op for cache backends that are not database tables (Redis), and for a table that exists.
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


class Migration(migrations.Migration):
    dependencies = [("investigations", "0002_diagnosis_findings_discovery_pins")]

    operations = [migrations.RunPython(create_cache_table, migrations.RunPython.noop)]
