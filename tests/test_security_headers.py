"""The Content-Security-Policy every page carries, and templates that can live with it
(the browser tests check the pages themselves in chromium)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
# what a strict policy refuses: inline scripts, event-handler attributes, inline styles,
# and htmx's attribute code (hx-on, js: values), which needs eval
INLINE = {
    "inline script": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I),
    "event handler": re.compile(r"\son[a-z]+\s*=", re.I),
    "inline style": re.compile(r"\sstyle\s*=|<style", re.I),
    "hx-on": re.compile(r"\shx-on", re.I),
    "js: value": re.compile(r"""hx-(vals|headers)\s*=\s*['"]\s*js:""", re.I),
}


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/login/", "/", "/facts/", "/review/", "/index/"])
def test_every_page_carries_a_strict_policy(viewer_client: Client, url: str) -> None:
    policy = viewer_client.get(url)["Content-Security-Policy"]
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy


def test_no_template_has_code_or_style_the_policy_would_refuse() -> None:
    found = [
        f"{path.relative_to(TEMPLATES)}: {what}"
        for path in TEMPLATES.rglob("*.html")
        for what, pattern in INLINE.items()
        if pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_htmx_is_told_not_to_inject_styles_or_evaluate_code() -> None:
    base = (TEMPLATES / "base.html").read_text(encoding="utf-8")
    config = re.search(r'<meta name="htmx-config" content=\'([^\']+)\'', base)
    assert config is not None
    assert '"includeIndicatorStyles": false' in config.group(1)
    assert '"allowEval": false' in config.group(1)
