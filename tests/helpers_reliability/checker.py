"""A long-lived drift checker: reads a line per check from stdin, answers with one JSON
line (`reindex --check --json`'s report), so a test can check many times without
paying Django's start-up each time."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryadmin.settings")
django.setup()

from memoryadmin import rebuild  # noqa: E402

for _line in sys.stdin:
    print(json.dumps(rebuild.check().as_dict()), flush=True)
