"""Tenant walls around project memory (issue 33, facts/tenancy.py).

Before this version any user could read and write any project. From now on a project
belongs to the tenant of its id ("acme:shop" → acme, "shop-api" → no tenant) unless its
settings file says otherwise. So that existing deployments keep their projects and the
people using them, every project that the users of one single tenant alone wrote (its
turns and extraction runs) gets a settings file naming that tenant, when that differs
from what its id says. A project several tenants wrote keeps the rule of its id, and the
Projects page flags it for an admin to decide (share it, or give it to one tenant).
No card is moved or removed. Running it again changes nothing.
"""

from collections import defaultdict
from typing import Any

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone

SET_BY = "upgrade (migration facts 0010)"


def assign_tenants_from_history(apps: Any, schema_editor: Any) -> None:
    from facts import tenancy

    Turn = apps.get_model("facts", "Turn")
    ExtractionRun = apps.get_model("facts", "ExtractionRun")
    AuditEvent = apps.get_model("facts", "AuditEvent")
    writers: dict[str, set[str]] = defaultdict(set)
    for model in (Turn, ExtractionRun):
        rows = model.objects.exclude(project_id="").values_list("project_id", "user_id").distinct()
        for project_id, user_id in rows.iterator():
            writers[project_id].add(tenancy.tenant_of(user_id))
    root = settings.MEMORY_ROOT
    at = timezone.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    for project_id, tenants in sorted(writers.items()):
        if len(tenants) != 1:
            continue
        (tenant,) = tenants
        try:
            path = tenancy.settings_path(project_id, root)
        except Exception:  # an id no folder can be made of never held cards either
            continue
        if path.exists() or tenant == tenancy.tenant_of(project_id):
            continue
        tenancy.write_settings(root, project_id, tenant=tenant, shared=False, set_by=SET_BY, set_at=at)
        AuditEvent.objects.create(
            actor=SET_BY,
            action="project",
            target=project_id[:200],
            details={
                "tenant": tenant,
                "shared": False,
                "before": {"tenant": tenancy.tenant_of(project_id), "shared": False},
            },
        )


class Migration(migrations.Migration):
    dependencies = [
        ("facts", "0011_audit_add_fact"),
    ]

    operations = [
        migrations.AlterField(
            model_name="auditevent",
            name="action",
            field=models.CharField(
                choices=[
                    ("approve", "Approve"),
                    ("correct", "Correct"),
                    ("dismiss", "Dismiss"),
                    ("expire", "Expire"),
                    ("restore", "Restore"),
                    ("review_by", "Review By"),
                    ("revert", "Revert"),
                    ("delete", "Delete"),
                    ("forget_thread", "Forget Thread"),
                    ("profile_edit", "Profile Edit"),
                    ("rebuild", "Rebuild"),
                    ("settings", "Settings"),
                    ("api_key", "Api Key"),
                    ("resolve", "Resolve"),
                    ("retry_turns", "Retry Turns"),
                    ("erase", "Erase"),
                    ("export", "Export"),
                    ("import", "Import"),
                    ("team", "Team"),
                    ("project", "Project"),
                    ("add_fact", "Add Fact"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(assign_tenants_from_history, migrations.RunPython.noop),
    ]
