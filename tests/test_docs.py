"""Every reference in the repository points into the repository, and the module map is true.

A newcomer has the clone and nothing else: the design is `docs/design.md`, the map of
modules `docs/architecture.md`. These tests read files only (no database, no network).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("facts", "retrieval", "dashboard", "memoryadmin")

# Folders that are not the project's own text (as in .gitignore), and the kinds of file
# that hold text a person reads.
SKIPPED_DIRS = {
    ".git", ".venv", "var", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".hypothesis",
    "staticfiles", "test-artifacts", ".e2e", ".bench", "node_modules",
}  # fmt: skip
TEXT_SUFFIXES = {".py", ".md", ".html", ".txt", ".toml", ".json", ".jsonl", ".sh", ".js", ".css", ".yml", ".yaml"}
TEXT_NAMES = {"Makefile", "run"}

# Spelt in pieces so this file does not cite them itself. The original design and style
# notes lived outside the repository, where a newcomer cannot open them; nor is the
# host's work folder a place to point at.
OUTSIDE = ("DESIGN" + ".md", "STYLE" + ".md", "HELPERS" + ".md", "SEED" + "-article", "/work" + "/")

SECTION_CITE = re.compile(r"docs/design\.md §(\d+(?:\.\d+)?)")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def text_files(root: Path) -> list[Path]:
    found = []
    for path in root.rglob("*"):
        if any(part in SKIPPED_DIRS for part in path.relative_to(root).parts):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES):
            found.append(path)
    return sorted(found)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def headings(markdown: Path) -> list[str]:
    """The page's headings, fenced code left out."""
    found, fenced = [], False
    for line in read(markdown).splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.*)", line)):
            found.append(match.group(1))
    return found


def anchors(markdown: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (lower case, punctuation dropped,
    spaces as hyphens, a repeated heading numbered)."""
    seen: dict[str, int] = {}
    result = set()
    for heading in headings(markdown):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def design_sections(design: Path) -> set[str]:
    """Section numbers of the design page: "5" for "## 5. Writing memory", "5.3" for "### 5.3 The gate"."""
    return {m.group(1) for h in headings(design) if (m := re.match(r"(\d+(?:\.\d+)?)\.?\s", h))}


# --- the checks, each returning what it found wrong ------------------------------------


def outside_citations(root: Path) -> list[str]:
    found = []
    for path in text_files(root):
        for number, line in enumerate(read(path).splitlines(), 1):
            found += [f"{path.relative_to(root)}:{number}: {word}" for word in OUTSIDE if word in line]
    return found


def unknown_design_sections(root: Path) -> list[str]:
    sections = design_sections(root / "docs" / "design.md")
    found = []
    for path in text_files(root):
        found += [f"{path.relative_to(root)}: §{n}" for n in SECTION_CITE.findall(read(path)) if n not in sections]
    return found


def broken_links(root: Path) -> list[str]:
    found = []
    for page in (p for p in text_files(root) if p.suffix == ".md"):
        for target in MD_LINK.findall(read(page)):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or root.resolve() not in (linked, *linked.parents):
                found.append(f"{page.relative_to(root)}: {target} (no such file in the repository)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                found.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return found


def architecture_paths(lines: Iterable[str]) -> list[str]:
    """Every module path the architecture page names: the first cell of each table row,
    relative to the app of the section it is in, and every `app/….py` path in the text."""
    paths: list[str] = []
    app = None
    for line in lines:
        if line.startswith("## "):
            heading = re.match(r"##\s+(\w+)\s+—", line)
            app = heading.group(1) if heading and heading.group(1) in APPS else None
        if app and line.startswith("| `"):
            paths += [f"{app}/{name}" for name in re.findall(r"`([^`]+)`", line.split("|")[1])]
        paths += re.findall(rf"`((?:{'|'.join(APPS)})/[\w/]*(?:\.py|/))`", line)
    return paths


def missing_modules(root: Path) -> list[str]:
    paths = architecture_paths(read(root / "docs" / "architecture.md").splitlines())
    return [p for p in paths if not (root / p).exists() or (p.endswith("/") and not (root / p).is_dir())]


# --- the repository -------------------------------------------------------------------


def test_it_cites_no_file_outside_the_repository() -> None:
    found = outside_citations(ROOT)
    assert not found, "cite docs/design.md or CONTRIBUTING.md instead:\n" + "\n".join(found)


def test_every_cited_design_section_exists() -> None:
    # numbered the way the code cites it
    assert {"1", "4", "5.1", "5.3", "14"} <= design_sections(ROOT / "docs" / "design.md")
    found = unknown_design_sections(ROOT)
    assert not found, "docs/design.md has no such section:\n" + "\n".join(found)


def test_every_relative_link_in_the_docs_reaches_a_file_and_its_heading() -> None:
    found = broken_links(ROOT)
    assert not found, "\n".join(found)


def test_every_module_named_in_the_architecture_map_exists() -> None:
    paths = architecture_paths(read(ROOT / "docs" / "architecture.md").splitlines())
    assert len(paths) > 80  # the four tables were read, not skipped
    assert {"facts/storage/writer.py", "retrieval/render.py", "dashboard/views/review.py", "memoryadmin/api.py"} <= set(
        paths
    )
    found = missing_modules(ROOT)
    assert not found, "docs/architecture.md names modules that do not exist:\n" + "\n".join(found)


def test_the_readme_links_the_design_and_contributing() -> None:
    readme = read(ROOT / "README.md")
    assert "](docs/design.md)" in readme and "](CONTRIBUTING.md)" in readme


# --- the checks catch what they are for ----------------------------------------------


def test_the_checks_catch_an_outside_citation_a_missing_section_link_and_module(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "ids.py").write_text(f'"""Ids ({OUTSIDE[0]} §3, docs/design.md §4, docs/design.md §9)."""\n')
    (tmp_path / "docs" / "design.md").write_text("# Design\n\n## 4. The files\n\n### 4.1 Cards\n")
    (tmp_path / "docs" / "architecture.md").write_text(
        "# Map\n\n## facts — the write side\n\n| module | owns |\n|---|---|\n"
        "| `ids.py`, `gone.py` | ids |\n\nSee `retrieval/nowhere.py`.\n"
    )
    (tmp_path / "README.md").write_text(
        "[design](docs/design.md#4-the-files) [cards](docs/design.md#41-cards) [x](docs/x.md) "
        "[gone](docs/design.md#9-reading) [web](https://example.com/) [up](../outside.md)\n"
    )
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "site.py").write_text(f"# {OUTSIDE[0]}\n")  # not the project's text

    assert outside_citations(tmp_path) == [f"facts/ids.py:1: {OUTSIDE[0]}"]
    assert unknown_design_sections(tmp_path) == ["facts/ids.py: §9"]
    assert broken_links(tmp_path) == [
        "README.md: docs/x.md (no such file in the repository)",
        "README.md: docs/design.md#9-reading (no such heading)",
        "README.md: ../outside.md (no such file in the repository)",
    ]
    assert missing_modules(tmp_path) == ["facts/gone.py", "retrieval/nowhere.py"]
