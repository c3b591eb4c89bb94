"""The guards CI holds beside lint-imports (.ci/run; tests/test_layers.py runs them too).

- No file in src/tether over 800 lines, unless pyproject's [tool.tether.long-files] lists
  it with a reason (and a file listed there is still long, so the list stays true).
- An import inside a function (ruff's PLC0415 lets a file have them only where pyproject
  says why) keeps a heavy third-party package out of what imports the file: it names one of
  [tool.tether.lazy-imports] packages, a module that exists on some platforms only, or a
  module of tether's that imports such a package at its top. The command line's modules may
  load tether's own modules when a command runs, so that `tether --help` stays quick.
- No circle of imports anywhere in the package, in-function imports and imports for type
  checkers alone (under ``if TYPE_CHECKING:``) counted: the floors of import-linter's
  contract order the packages, this keeps every package's own modules in order too. Where
  one side only needs a name, it names a small protocol on its own floor.

usage: python .ci/guards.py  (from the repository's root; exits 1 with what is wrong)
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tether"
LIMIT = 800


def settings() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        tool = tomllib.load(f)["tool"]["tether"]
    assert isinstance(tool, dict)
    return tool


def sources() -> Iterator[Path]:
    yield from sorted(SRC.rglob("*.py"))


def long_files(listed: dict[str, str]) -> list[str]:
    """What breaks the size rule: files over the limit and not listed, listed files that
    are not (or no longer) over it."""
    wrong = []
    for path in sources():
        name = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > LIMIT and not listed.get(name, "").strip():
            wrong.append(f"{name}: {lines} lines (over {LIMIT}; split it by idea, or list it "
                         f"in [tool.tether.long-files] with the reason)")
    for name in listed:
        path = ROOT / name
        if not path.is_file():
            wrong.append(f"[tool.tether.long-files] lists {name}, which does not exist")
        elif len(path.read_text().splitlines()) <= LIMIT:
            wrong.append(f"[tool.tether.long-files] lists {name}, which is not over {LIMIT} "
                         f"lines any more: take it off the list")
    return wrong


def module_of(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolved(node: ast.ImportFrom, path: Path) -> str:
    """The absolute name of a ``from X import`` (relative ones resolved)."""
    if not node.level:
        return node.module or ""
    package = module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def imported(node: ast.Import | ast.ImportFrom, path: Path) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = resolved(node, path)
    # ``from tether.x import y``: y may be a module of its own.
    return [f"{base}.{a.name}" if (SRC.parent / f"{base}.{a.name}".replace(".", "/")).exists()
            or (SRC.parent / (f"{base}.{a.name}".replace(".", "/") + ".py")).exists()
            else base for a in node.names]


def file_of(module: str) -> Path | None:
    base = SRC.parent / module.replace(".", "/")
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def top_imports(path: Path) -> set[str]:
    """The roots of what a module imports at its top (type checkers' imports left out)."""
    roots = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            roots.update(m.split(".")[0] for m in imported(node, path))
    return roots


def lazy_imports(packages: set[str], platform: set[str],
                 modules: frozenset[str] = frozenset()) -> list[str]:
    """Imports inside functions (and classes) that keep nothing heavy out (``modules``:
    tether's own that the core loads only when a feature is asked for)."""
    wrong = []
    for path in sources():
        name = path.relative_to(ROOT).as_posix()
        command_line = path.is_relative_to(SRC / "cli")
        for node in inner_imports(ast.parse(path.read_text())):
            for module in dict.fromkeys(imported(node, path)):
                root = module.split(".")[0]
                if root in packages or root in platform:
                    continue
                if root == "tether":
                    if command_line or module in modules:
                        continue
                    target = file_of(module)
                    if target is not None and top_imports(target) & packages:
                        continue
                wrong.append(f"{name}:{node.lineno}: `{module}` imported inside a function "
                             f"keeps nothing heavy out: import it at the top")
    return wrong


def inner_imports(node: ast.AST, inside: bool = False
                  ) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports inside a function or a class body, at any depth."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            if inside:
                yield child
        else:
            scope = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            yield from inner_imports(child, inside or scope)


def circles() -> list[str]:
    """Every circle of imports in the package (strongly connected modules)."""
    import grimp

    graph = grimp.build_graph("tether", cache_dir=None, exclude_type_checking_imports=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(start: str) -> None:
        # Tarjan's strongly connected components, iterative (the graph is deep enough).
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in edges:
                    continue
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return [f"import circle: {' <-> '.join(c)}" for c in found]


def main() -> int:
    tool = settings()
    lazy = tool.get("lazy-imports", {})
    assert isinstance(lazy, dict)
    listed = tool.get("long-files", {})
    assert isinstance(listed, dict)
    wrong = [*long_files(listed),
             *lazy_imports(set(lazy.get("packages", ())), set(lazy.get("platform", ())),
                          frozenset(lazy.get("modules", ()))),
             *circles()]
    for line in wrong:
        print(line)
    print(f"guards: {'ok' if not wrong else f'{len(wrong)} problem(s)'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
