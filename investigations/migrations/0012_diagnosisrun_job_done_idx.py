"""An index for a job's latest finished diagnosis, which every report link's training step is read from
(a job with 4,040 runs on PostgreSQL: 18.6 ms -> 0.02 ms)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("investigations", "0011_investigation_newest_idx"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="diagnosisrun",
            index=models.Index(
                condition=models.Q(("status", "done")),
                fields=["job", "kind", "-finished", "-id"],
                name="diagnosisrun_job_done_idx",
            ),
        ),
    ]
