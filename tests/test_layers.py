"""The import rules of docs/architecture.md hold: `facts` never imports `retrieval`, the read
side's modules import each other without a cycle, and no module takes another's private
names. Imports inside functions count as much as those at the top: a lazy import is
still a dependency, only hidden.

These tests read the source (no database, no Django).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Module:
    name: str  # dotted: "retrieval.index"
    imports: set[str] = field(default_factory=set)  # dotted names as written, resolved
    # (module imported from, private name, line): `from .x import _y`, and `x._y` where
    # `x` was imported as a project module.
    private: list[tuple[str, str, int]] = field(default_factory=list)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(node: ast.ImportFrom, name: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def read_modules(root: Path, package: str) -> dict[str, Module]:
    """Every module of `package` under `root` (migrations left out), with what it imports."""
    found: dict[str, Module] = {}
    paths = [p for p in sorted((root / package).rglob("*.py")) if "migrations" not in p.parts]
    names = {module_name(root, p) for p in paths}
    for path in paths:
        module = Module(module_name(root, path))
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        aliases: dict[str, str] = {}  # local name -> project module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    module.imports.add(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, module.name, path.name == "__init__.py")
                for alias in node.names:
                    full = f"{source}.{alias.name}"
                    if full in names:  # `from . import index`: the module itself
                        module.imports.add(full)
                        aliases[alias.asname or alias.name] = full
                    else:
                        module.imports.add(source)
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            module.private.append((source, alias.name, node.lineno))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                module.private.append((aliases[node.value.id], node.attr, node.lineno))
        found[module.name] = module
    return found


def imports_of(modules: dict[str, Module], prefix: str) -> list[str]:
    """`module: imported` for every import of `prefix` (or a module under it)."""
    return sorted(
        f"{m.name}: {name}"
        for m in modules.values()
        for name in m.imports
        if name == prefix or name.startswith(f"{prefix}.")
    )


def edges(modules: dict[str, Module]) -> dict[str, set[str]]:
    """Module -> the modules of the same set it imports (importing `a.b.c` imports `a.b` too)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module in modules.values():
        for name in module.imports:
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                target = ".".join(parts[:end])
                if target in modules and target != module.name:
                    graph[module.name].add(target)
    return graph


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    graph = edges(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def private_imports(modules: dict[str, Module], project: tuple[str, ...]) -> list[str]:
    """`module:line: source._name` for private names a module takes from another project module."""
    return sorted(
        f"{m.name}:{line}: {source}.{name}"
        for m in modules.values()
        for source, name, line in m.private
        if source != m.name and source.split(".")[0] in project
    )


# --- the repository -------------------------------------------------------------------

PROJECT = ("facts", "retrieval", "dashboard", "memoryadmin")


def test_facts_never_imports_retrieval() -> None:
    found = imports_of(read_modules(ROOT, "facts"), "retrieval")
    assert not found, "the write side imports the read side (register a hook instead):\n" + "\n".join(found)


def test_the_read_side_imports_without_a_cycle() -> None:
    modules = read_modules(ROOT, "retrieval")
    assert len(modules) > 20 and "retrieval.index" in modules
    found = cycles(modules)
    assert not found, "import cycles in retrieval/:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_no_module_of_facts_or_retrieval_takes_another_modules_private_names() -> None:
    found = [
        *private_imports(read_modules(ROOT, "facts"), PROJECT),
        *private_imports(read_modules(ROOT, "retrieval"), PROJECT),
    ]
    assert not found, "private names used across modules (make them public where they live):\n" + "\n".join(found)


# --- the checks catch what they are for ----------------------------------------------


def test_the_checks_catch_a_lazy_import_a_cycle_and_a_private_name(tmp_path: Path) -> None:
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "__init__.py").write_text("")
    (tmp_path / "facts" / "plan.py").write_text(
        "def golden():\n    from retrieval.models import GoldenQuery\n    return GoldenQuery\n"
    )
    (tmp_path / "retrieval").mkdir()
    (tmp_path / "retrieval" / "__init__.py").write_text("")
    (tmp_path / "retrieval" / "derived.py").write_text("from .render import fact_tail_tokens\n")
    (tmp_path / "retrieval" / "render.py").write_text("from . import index\n")
    (tmp_path / "retrieval" / "index.py").write_text(
        "from .indexdb import _connect, connection\n\ndef lazy():\n    from . import derived\n"
    )
    (tmp_path / "retrieval" / "indexdb.py").write_text("def connection(): ...\ndef _connect(): ...\n")
    (tmp_path / "retrieval" / "scancache.py").write_text("from . import index\n\nX = index._THASH\n")
    (tmp_path / "retrieval" / "search.py").write_text("from . import render\n")  # in no cycle

    facts = read_modules(tmp_path, "facts")
    retrieval = read_modules(tmp_path, "retrieval")
    assert imports_of(facts, "retrieval") == ["facts.plan: retrieval.models"]
    assert cycles(retrieval) == [["retrieval.derived", "retrieval.index", "retrieval.render"]]
    assert private_imports(retrieval, PROJECT) == [
        "retrieval.index:1: retrieval.indexdb._connect",
        "retrieval.scancache:3: retrieval.index._THASH",
    ]
