"""Settings read from the environment: a mistyped value stops the start with a message
naming the variable, reading settings writes nothing, and the log format is chosen once."""

from __future__ import annotations

import json
import logging
import runpy
import stat
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from memoryadmin.apps import make_sqlite_folders
from memoryadmin.logging_utils import JsonFormatter
from memoryadmin.settings import env_bool, env_float, env_int

SETTINGS_FILE = Path(__file__).resolve().parent.parent / "memoryadmin" / "settings.py"


def read_settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    """The settings file evaluated afresh under `env`, as a new process would see it."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


@pytest.mark.parametrize("raw", ["1", "true", "True", " YES ", "on"])
def test_it_reads_the_usual_words_for_yes(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("SOME_FLAG", raw)
    assert env_bool("SOME_FLAG", False) is True


@pytest.mark.parametrize("raw", ["0", "false", "False", "no", "OFF"])
def test_it_reads_the_usual_words_for_no(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("SOME_FLAG", raw)
    assert env_bool("SOME_FLAG", True) is False


def test_it_keeps_the_default_when_a_variable_is_unset_or_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SOME_FLAG", raising=False)
    assert env_bool("SOME_FLAG", True) is True
    monkeypatch.setenv("SOME_FLAG", "")
    assert env_bool("SOME_FLAG", True) is True
    assert env_int("SOME_FLAG", 7) == 7
    assert env_float("SOME_FLAG", 0.5) == 0.5


@pytest.mark.parametrize("raw", ["ture", "y", "enabled", "2"])
def test_it_refuses_a_misspelt_boolean_naming_the_variable_and_the_words_it_accepts(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    with pytest.raises(ImproperlyConfigured) as refused:
        read_settings(monkeypatch, CSRF_COOKIE_SECURE=raw)
    message = str(refused.value)
    assert "CSRF_COOKIE_SECURE" in message and repr(raw) in message
    assert "true" in message and "false" in message


def test_it_refuses_a_number_that_is_not_one_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"API_MAX_MESSAGES='5OO' is not an integer"):
        read_settings(monkeypatch, API_MAX_MESSAGES="5OO")
    monkeypatch.delenv("API_MAX_MESSAGES")
    with pytest.raises(ImproperlyConfigured, match=r"MEMORY_LLM_TIMEOUT='sixty' is not a finite number"):
        read_settings(monkeypatch, MEMORY_LLM_TIMEOUT="sixty")


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
def test_it_refuses_a_number_that_is_not_finite(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("MEMORY_CONFIDENCE_THRESHOLD", raw)
    with pytest.raises(ImproperlyConfigured, match="MEMORY_CONFIDENCE_THRESHOLD"):
        env_float("MEMORY_CONFIDENCE_THRESHOLD", 0.7)


def test_it_reads_numbers_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = read_settings(monkeypatch, API_MAX_MESSAGES="12", MEMORY_CONFIDENCE_THRESHOLD="0.85")
    assert settings["API_MAX_MESSAGES"] == 12
    assert settings["MEMORY_CONFIDENCE_THRESHOLD"] == 0.85


def test_it_creates_no_folder_when_settings_are_read(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    var = tmp_path / "missing" / "var"
    monkeypatch.delenv("DATABASE_URL", raising=False)
    settings = read_settings(monkeypatch, VAR_DIR=str(var))
    assert settings["DATABASES"]["default"]["NAME"] == str(var / "db.sqlite3")
    assert not (tmp_path / "missing").exists()


def test_it_creates_the_sqlite_databases_folder_private_at_startup(tmp_path: Path) -> None:
    here = tmp_path / "dbs"
    database = here / "var" / "db.sqlite3"
    make_sqlite_folders(
        {
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(database)},
            "memory": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            "pg": {"ENGINE": "django.db.backends.postgresql", "NAME": str(here / "not-a-folder" / "x")},
        }
    )
    assert stat.S_IMODE(database.parent.stat().st_mode) == 0o700
    assert not database.exists(), "SQLite creates the file itself"
    assert sorted(p.name for p in here.iterdir()) == ["var"]


def test_it_logs_json_lines_when_asked_and_plain_lines_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = read_settings(monkeypatch)["LOGGING"]
    json_logging = read_settings(monkeypatch, LOG_FORMAT="json")["LOGGING"]
    assert plain["handlers"]["console"]["formatter"] == "plain"
    assert json_logging["handlers"]["console"]["formatter"] == "json"
    formatters = json_logging["formatters"]
    assert formatters["plain"] == {"()": "memoryadmin.logging_utils.PlainFormatter"}
    assert formatters["json"] == {"()": "memoryadmin.logging_utils.JsonFormatter"}
    record = logging.LogRecord("facts", logging.INFO, __file__, 1, "run finished", None, None)
    assert json.loads(JsonFormatter().format(record))["logger"] == "facts"
