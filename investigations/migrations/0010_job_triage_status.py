"""Job.triage_status: the state of a job's log triage as a column, filled from Job.triage["state"]."""

from django.db import migrations, models

STATES = ("queued", "running", "done", "failed", "none")


def fill(apps, schema_editor):
    """Each job's status from its triage JSON: its "state"; a contract stored without one is done."""
    Job = apps.get_model("investigations", "Job")
    for job in Job.objects.exclude(triage={}).only("pk", "triage").iterator():
        triage = job.triage if isinstance(job.triage, dict) else {}
        state = triage.get("state")
        if state not in STATES:
            state = "done" if isinstance(triage.get("job"), dict) else ""
        if state:
            Job.objects.filter(pk=job.pk).update(triage_status=state)


class Migration(migrations.Migration):
    dependencies = [
        ("investigations", "0009_timeline_note"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="triage_status",
            field=models.CharField(
                blank=True,
                choices=[
                    ("", "Not triaged"),
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("done", "Done"),
                    ("failed", "Failed"),
                    ("none", "No log"),
                ],
                db_index=True,
                default="",
                max_length=16,
            ),
        ),
        # Backwards the column goes away; the JSON never stopped holding the state.
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
