"""`manage.py doctor` names each problem and exits 1; a healthy install passes."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from facts.models import FactCard, Turn
from facts.storage.store import Store
from facts.storage.writer import save_card

pytestmark = pytest.mark.django_db


class _Models(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.server.status)  # type: ignore[attr-defined]
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"object": "list", "data": []}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def model_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    server.status = 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.fixture
def healthy(settings, model_server: ThreadingHTTPServer, memory_root: Path) -> ThreadingHTTPServer:
    settings.DEBUG = False
    settings.SECRET_KEY = "a-real-secret-key-of-fifty-characters-0123456789abcdef"
    settings.ALLOWED_HOSTS = ["memory.example.com"]
    settings.MEMORY_LLM_BASE_URL = f"http://127.0.0.1:{model_server.server_port}/v1"
    os.chmod(memory_root, 0o700)
    return model_server


def _doctor(*args: str) -> tuple[int, list[dict]]:
    out = StringIO()
    try:
        call_command("doctor", "--json", *args, stdout=out, stderr=StringIO())
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, json.loads(out.getvalue())["findings"]


def _failures(findings: list[dict]) -> list[str]:
    return [f"{f['check']}: {f['message']}" for f in findings if f["level"] == "fail"]


def test_a_healthy_installation_passes(healthy, make_card) -> None:
    save_card(make_card(), actor="seed")
    code, findings = _doctor()
    assert _failures(findings) == []
    assert code == 0
    assert {f["check"] for f in findings if f["level"] == "ok"} >= {"settings", "database", "files", "index", "turns"}


def test_it_fails_when_debug_is_off_with_the_default_secret_key(healthy, settings) -> None:
    settings.SECRET_KEY = "insecure-local-only-key-change-me-in-production-0000"
    code, findings = _doctor()
    assert code == 1
    assert any("SECRET_KEY" in f for f in _failures(findings))


def test_it_fails_on_a_wildcard_host_in_production(healthy, settings) -> None:
    settings.ALLOWED_HOSTS = ["*"]
    assert any("ALLOWED_HOSTS" in f for f in _failures(_doctor()[1]))


def test_it_fails_on_inconsistent_memory_settings(healthy, settings) -> None:
    settings.MEMORY_CONFIDENCE_THRESHOLD = 1.5
    settings.MEMORY_CORRECTION_BUDGET = settings.MEMORY_CONTEXT_BUDGET + 1
    failures = _failures(_doctor()[1])
    assert any("MEMORY_CONFIDENCE_THRESHOLD" in f for f in failures)
    assert any("MEMORY_CORRECTION_BUDGET" in f for f in failures)


def test_it_fails_when_memory_root_is_writable_by_everyone(healthy, memory_root: Path) -> None:
    os.chmod(memory_root, 0o777)
    code, findings = _doctor()
    assert code == 1
    assert any("writable by every user" in f for f in _failures(findings))


def test_it_fails_when_memory_root_is_missing(healthy, settings, tmp_path: Path) -> None:
    settings.MEMORY_ROOT = tmp_path / "nowhere"
    assert any("does not exist" in f for f in _failures(_doctor("--skip", "index")[1]))


def test_it_reports_drift_and_names_the_fix(healthy, make_card) -> None:
    card = save_card(make_card(), actor="seed")
    FactCard.objects.filter(id=card.id).delete()
    code, findings = _doctor()
    assert code == 1
    assert any("drifted" in f and "reindex" in f for f in _failures(findings))


def test_it_reports_an_unreadable_card(healthy, store: Store, make_card) -> None:
    card = save_card(make_card(), actor="seed")
    store.card_path(card).write_text("---\nid: [broken\n---\n")
    assert any("cannot be read" in f for f in _failures(_doctor()[1]))


def test_it_fails_on_turns_pending_for_too_long(healthy) -> None:
    turn = Turn.objects.create(user_id="u", agent_name="coder", thread_id="t", messages=[], message_ids=[])
    assert _doctor()[0] == 0, "a fresh pending turn is normal"
    Turn.objects.filter(pk=turn.pk).update(received_at=timezone.now() - timedelta(hours=2))
    code, findings = _doctor()
    assert code == 1
    assert any("pending" in f and "db_worker" in f for f in _failures(findings))


def test_it_fails_on_an_erasure_left_unfinished(healthy) -> None:
    from facts.models import Erasure

    marker = Erasure.objects.create(user_id="gone", actor="t")
    assert _doctor()[0] == 0, "an erasure that just began is running, not stuck"
    Erasure.objects.filter(pk=marker.pk).update(started_at=timezone.now() - timedelta(minutes=5))
    code, findings = _doctor()
    assert code == 1
    assert any("erasure" in f and "manage.py erase" in f for f in _failures(findings))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_it_fails_fast_when_the_model_endpoint_is_down(healthy, settings) -> None:
    settings.MEMORY_LLM_BASE_URL = f"http://127.0.0.1:{_closed_port()}/v1"
    settings.MEMORY_DOCTOR_HTTP_TIMEOUT = 1.0
    code, findings = _doctor()
    assert code == 1
    assert any(f.startswith("model:") and "does not answer within 1 s" in f for f in _failures(findings))


def test_it_fails_when_the_model_endpoint_refuses_the_key(healthy) -> None:
    healthy.status = 401
    assert any("API key" in f for f in _failures(_doctor()[1]))


def test_it_fails_when_the_llm_is_chosen_but_no_model_is_configured(healthy, settings) -> None:
    settings.MEMORY_LLM_BASE_URL = ""
    settings.MEMORY_EXTRACTOR = "llm"
    assert any("MEMORY_LLM_BASE_URL" in f for f in _failures(_doctor()[1]))


def test_with_no_model_configured_it_reports_the_rule_extractor(healthy, settings) -> None:
    settings.MEMORY_LLM_BASE_URL = ""
    settings.MEMORY_EXTRACTOR = ""
    code, findings = _doctor()
    assert code == 0, _failures(findings)
    out = StringIO()
    call_command("doctor", stdout=out, stderr=StringIO())
    assert "Extraction runs with the rules (built-in" in out.getvalue()


def test_warnings_count_only_when_strict(healthy, memory_root: Path) -> None:
    os.chmod(memory_root, 0o755)  # readable by others: a warning
    assert _doctor()[0] == 0
    assert _doctor("--strict")[0] == 1


def test_the_plain_report_names_each_problem(healthy, settings) -> None:
    settings.MEMORY_LLM_BASE_URL = ""
    settings.MEMORY_EXTRACTOR = "llm"
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("doctor", stdout=StringIO(), stderr=err)
    assert "FAIL model: MEMORY_EXTRACTOR=llm but MEMORY_LLM_BASE_URL is not set" in err.getvalue()


# --- structured logs (memoryadmin/logging_utils.py) ----------------------------------------


def test_events_are_one_json_object_per_line() -> None:
    import logging

    from memoryadmin.logging_utils import JsonFormatter

    record = logging.LogRecord("memory.events", logging.INFO, __file__, 1, "curation", (), None)
    record.event = "curation"
    record.fields = {"action": "approve", "actor": "rev", "note": "line\nbreak </script>"}
    line = JsonFormatter().format(record)
    assert "\n" not in line
    data = json.loads(line)
    assert (data["event"], data["action"], data["actor"], data["level"]) == ("curation", "approve", "rev", "INFO")
    assert data["note"] == "line\nbreak </script>"


def test_every_finished_extraction_run_is_logged(caplog) -> None:
    from facts.models import ExtractionRun

    caplog.set_level("INFO", logger="memory.events")
    run = ExtractionRun.objects.create(user_id="u", agent_name="coder", thread_id="t")
    assert not [r for r in caplog.records if getattr(r, "event", None) == "extraction_run"], "running: not yet"
    run.status = ExtractionRun.Status.FAILED
    run.error = "model timed out"
    run.save()
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "extraction_run"]
    assert record.levelname == "WARNING"
    assert record.fields["status"] == "failed"
    assert record.fields["run_id"] == run.pk
    assert record.fields["error"] == "model timed out"


def test_every_curation_action_is_logged(caplog) -> None:
    from facts.models import AuditEvent

    caplog.set_level("INFO", logger="memory.events")
    AuditEvent.objects.create(actor="rev", action="expire", user_id="u", agent_name="coder", target="fact_x")
    [record] = [r for r in caplog.records if getattr(r, "event", None) == "curation"]
    assert record.fields["action"] == "expire"
    assert record.fields["actor"] == "rev"


def test_doctor_says_how_the_model_cuts_texts(healthy, embeddings) -> None:
    _, findings = _doctor()
    (line,) = [f["message"] for f in findings if f["check"] == "embeddings"]
    assert "queries use the one-text path" in line
    assert "texts are cut by the sentencepiece library" in line
