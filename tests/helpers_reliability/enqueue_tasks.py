"""python enqueue_tasks.py N LOG — enqueue N `record_run` jobs on the database backend."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
django.setup()

from django.db import transaction  # noqa: E402

from tests.helpers_reliability.tasks import record_run  # noqa: E402

with transaction.atomic():
    for n in range(int(sys.argv[1])):
        record_run.enqueue(n, sys.argv[2])
