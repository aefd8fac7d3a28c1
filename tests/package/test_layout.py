"""The package's layout: no import cycles, no private names imported across modules,
one owner per concept.

Read from the source with :mod:`ast` (nothing is imported), so a module that does not
import today is still checked.  Modules are found by walking the package directories,
so new modules and subpackages are covered without editing this file.  The package is
``exactattn/`` plus every ``exactattn.*`` directory mapped in pyproject's
``[tool.setuptools] package-dir`` (``exactattn.proofs`` = ``proofs/``).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "exactattn"


def package_roots() -> dict[str, Path]:
    """``{package name: directory}`` for exactattn and any subpackage kept elsewhere."""
    roots = {PACKAGE: ROOT / PACKAGE}
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapped = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    for name, where in mapped.items():
        if name.startswith(PACKAGE + ".") and (ROOT / where / "__init__.py").is_file():
            roots[name] = ROOT / where
    return roots


def package_modules() -> dict[str, tuple[Path, bool]]:
    """``{dotted module name: (file, is a package)}`` for every module of the package.

    A package is a directory with an ``__init__.py``; its name is that of its
    ``__init__.py``.  Directories that are not packages (and everything below them)
    are left out, as Python would not import them as part of exactattn.
    """
    modules: dict[str, tuple[Path, bool]] = {}
    for name, base in package_roots().items():
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if any(part == "__pycache__" for part in rel.parts):
                continue
            if not all((base / Path(*rel.parts[:i]) / "__init__.py").is_file()
                       for i in range(len(rel.parts))):
                continue
            parts = [name, *rel.parts[:-1]]
            is_package = path.name == "__init__.py"
            if not is_package:
                parts.append(path.stem)
            dotted = ".".join(parts)
            if dotted not in modules:  # a mapped root wins over a same-named directory
                modules[dotted] = (path, is_package)
    return modules


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))


def resolve_from(node: ast.ImportFrom, module: str | None, is_package: bool) -> str | None:
    """The absolute module a ``from ... import`` reads from (None: cannot be resolved,
    e.g. a relative import outside a package)."""
    if node.level == 0:
        return node.module
    if module is None:
        return None
    package = module if is_package else module.rpartition(".")[0]
    parts = package.split(".") if package else []
    if node.level - 1 > len(parts) - 1:
        return None
    parts = parts[:len(parts) - (node.level - 1)]
    if node.module:
        parts.append(node.module)
    return ".".join(parts)


def imports_of(module: str, path: Path, is_package: bool,
               known: set[str]) -> list[tuple[str, int]]:
    """``(imported exactattn module, line)`` for every import in ``module``, at any depth
    (top level, inside functions, under ``if TYPE_CHECKING``, in ``try``).

    ``import exactattn.a.b`` and ``from exactattn.a.b import x`` depend on
    ``exactattn.a.b`` (its ``__init__.py`` when it is a package); ``from exactattn.a
    import b`` depends on the submodule ``exactattn.a.b`` when there is one, otherwise
    on ``exactattn.a``.  The parent packages that Python initialises on the way are not
    counted (they are being initialised already when one of their own modules runs).
    """
    found = []
    for node in ast.walk(parse(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found.append((alias.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node, module, is_package)
            if base is None:
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if alias.name != "*" and sub in known:
                    found.append((sub, node.lineno))
                elif base in known:
                    found.append((base, node.lineno))
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], set[int]]]:
    modules = package_modules()
    known = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    lines: dict[tuple[str, str], set[int]] = {}
    for module, (path, is_package) in modules.items():
        for target, line in imports_of(module, path, is_package, known):
            if target != module:
                graph[module].add(target)
                lines.setdefault((module, target), set()).add(line)
    return graph, lines


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

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
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(components)


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the first module of a strongly connected component."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # cannot happen in a component


def display(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_import_cycles():
    graph, lines = import_graph()
    modules = package_modules()
    components = strongly_connected(graph)
    report = []
    for component in components:
        cycle = shortest_cycle(graph, component)
        steps = [f"    {a} -> {b}  ({display(modules[a][0])}:"
                 f"{','.join(map(str, sorted(lines[a, b])))})"
                 for a, b in zip(cycle, cycle[1:])]
        report.append(f"cycle {' -> '.join(cycle)}\n" + "\n".join(steps)
                      + (f"\n  (all of {', '.join(component)} import each other, directly "
                         f"or not)" if len(component) > len(cycle) - 1 else ""))
    assert not components, "import cycles between exactattn's modules (a lazy import " \
        "inside a function counts):\n" + "\n".join(report)


def python_files_to_check() -> list[Path]:
    """The package's modules, the tests and proofs/ (every ``.py`` below them)."""
    files = {path for path, _ in package_modules().values()}
    for folder in (ROOT / "tests", ROOT / "proofs"):
        files.update(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(files)


def module_name_of(path: Path) -> tuple[str | None, bool]:
    for name, (file, is_package) in package_modules().items():
        if file == path:
            return name, is_package
    return None, False


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_names_imported_across_modules():
    offenders = []
    for path in python_files_to_check():
        module, is_package = module_name_of(path)
        for node in ast.walk(parse(path)):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = resolve_from(node, module, is_package)
            ours = node.level > 0 or (base or "").split(".")[0] in (PACKAGE, "proofs")
            if not ours:
                continue
            private = [a.name for a in node.names if is_private(a.name)]
            if private:
                source = "." * node.level + (node.module or "")
                offenders.append(f"{display(path)}:{node.lineno}: from {source} import "
                                 f"{', '.join(private)}")
    assert not offenders, "private names imported from another module (make them public, " \
        "or move the code that needs them):\n" + "\n".join(offenders)


#: concept -> the one module that defines it (split modules by idea, not by a line count)
OWNERS = {
    "class Surd": "exactattn/numbers/reals.py",        # every exact real: algebraic, rotary, tanh
    "class Trig": "exactattn/numbers/reals.py",
    "class Tanh": "exactattn/numbers/reals.py",
    "def power_form": "exactattn/numbers/reals.py",    # canonical radicals theta^e
    "def softcap": "exactattn/numbers/reals.py",
    "def tighten": "exactattn/numbers/digits.py",      # the one Ziv loop
    "def enclosure_sign": "exactattn/numbers/digits.py",  # the one bounded sign from enclosures
    "class ExpRatio": "exactattn/numbers/ratio.py",
    "class LogSumExp": "exactattn/numbers/lse.py",
    "class Undecided": "exactattn/errors.py",
    "def undecided_tie": "exactattn/verify/compare.py",
    "class Call": "exactattn/call/inputs.py",            # the one input of every feature
    "class Policy": "exactattn/call/policy.py",
    "UNSUPPORTED = ": "exactattn/call/policy.py",         # the one capability table
    "class Reference": "exactattn/reference/reference.py",   # the one exact evaluator
    "class Real": "exactattn/numbers/real.py",           # the one value protocol
    "class Comparison": "exactattn/verify/compare.py",   # the one comparison accumulator
    "class ArrayImpl": "exactattn/verify/impls.py",      # the float attention, numpy and torch
}


def test_each_concept_has_one_owner():
    found: dict[str, list[str]] = {concept: [] for concept in OWNERS}
    for path, _ in package_modules().values():
        text = path.read_text(encoding="utf-8")
        for concept in OWNERS:
            if any(line.startswith(concept + "(") or line.startswith(concept + ":") or
                   (concept.endswith(" = ") and line.startswith(concept))
                   for line in text.splitlines()):
                found[concept].append(display(path))
    assert found == {concept: [owner] for concept, owner in OWNERS.items()}


# --------------------------------------------------------------------------- layers
#: the layers, lowest first: a module may import its own layer and the layers below
LAYERS = [
    ("base", ("errors", "options")),
    ("numbers", ("numbers",)),
    ("call", ("call",)),
    ("reference", ("reference", "gradients")),
    ("engines", ("engines", "examples")),
    ("cost", ("cost",)),
    ("checks", ("verify", "properties", "strategies", "blocks")),
    ("present", ("present", "page", "scale", "notebook")),
    ("audit", ("audit", "models", "testing")),
    ("commands", ("commands", "cli", "__main__", "proofs")),
]

#: import edges that go up a layer (importer -> imported): none.  The list was the debt,
#: which could only shrink; the last edge left with the head specs (call.spec ->
#: engines.head, now exactattn.engines.spec), so every import goes down or stays level.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def layer_of(module: str) -> int | None:
    """The rank of a module's layer (None: the package's ``__init__``, which exports names)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    for rank, (_, heads) in enumerate(LAYERS):
        if parts[1] in heads:
            return rank
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS")


def test_layers_import_downward():
    """No module imports a higher layer (lazy imports inside functions counted); KNOWN_UPWARD
    is empty, and a listed edge that is gone must leave the list."""
    graph, lines = import_graph()
    upward = set()
    for module, targets in graph.items():
        for target in targets:
            a, b = layer_of(module), layer_of(target)
            if a is not None and b is not None and b > a:
                upward.add((module, target))
    new = sorted(upward - set(KNOWN_UPWARD))
    gone = sorted(set(KNOWN_UPWARD) - upward)
    assert not new, "imports up a layer:\n" + "\n".join(
        f"  {m} -> {t}  (line {min(lines[(m, t)])})" for m, t in new)
    assert not gone, "no longer upward, remove from KNOWN_UPWARD:\n" + "\n".join(
        f"  {m} -> {t}" for m, t in gone)


def test_at_most_ten_modules_directly_in_the_package():
    top = sorted(p.name for p in (ROOT / PACKAGE).glob("*.py"))
    assert len(top) <= 10, top


def test_no_folder_cycles():
    """Folders (and top-level modules) import each other in one direction only (KNOWN_UPWARD,
    whose edges would be left out, is empty)."""
    graph, _ = import_graph()
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        a = ".".join(module.split(".")[:2])
        folders.setdefault(a, set())
        for target in targets - {t for m, t in KNOWN_UPWARD if m == module}:
            b = ".".join(target.split(".")[:2])
            if a != b and a != PACKAGE and b != PACKAGE:
                folders[a].add(b)
    for b in {t for ts in folders.values() for t in ts}:
        folders.setdefault(b, set())
    assert strongly_connected(folders) == [], strongly_connected(folders)
