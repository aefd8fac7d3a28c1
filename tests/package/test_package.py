"""The public surface: __all__, lazy imports, the version, packaging files."""

import subprocess
import sys
from pathlib import Path

import exactattn

ROOT = Path(__file__).parents[2]


def test_all_is_sorted_and_complete():
    assert exactattn.__all__ == sorted(exactattn.__all__)
    for name in exactattn.__all__:
        assert hasattr(exactattn, name), name


def test_import_is_light():
    code = ("import sys, exactattn; "
            "print(sorted(m for m in ('sympy', 'hypothesis', 'flint', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_layout_of_the_repository():
    for name in ("pyproject.toml", "README.md", "exactattn", "proofs", "tests", ".ci/run"):
        assert (ROOT / name).exists(), name
    assert (ROOT / "exactattn" / "py.typed").exists()


def test_version_matches_pyproject():
    import tomllib
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["version"] == exactattn.__version__
    assert meta["scripts"]["exactattn"] == "exactattn.cli:main"


def test_docs_install_extras_as_the_quick_start_does():
    """Every ``pip install`` of an extra in README.md and docs/*.md is the quick start's form,
    ``pip install -e '.[extra]'`` (a source checkout), of an extra pyproject.toml defines."""
    import re
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    assert "python3 -m pip install -e '.[test]'" in readme        # the quick start's form
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    found = []
    for page in pages:
        for spec in re.findall(r"pip\s+install\s+((?:-e\s+)?'?[\w.-]*\[[^\]]*\]'?)",
                               page.read_text()):
            found.append(spec)
            assert re.fullmatch(r"-e\s+'\.\[(\w+)\]'", spec), f"{page.name}: {spec}"
            assert re.search(r"\[(\w+)\]", spec).group(1) in extras, f"{page.name}: {spec}"
    assert len(found) >= 8


#: the most names all ``__all__`` lists may hold together: the public surface is what users
#: import (the README, docs/ and the top-level names); internal helpers are not listed
MAX_PUBLIC_NAMES = 300


def public_names() -> dict[str, int]:
    """``{module: names in its __all__}`` for every module of exactattn that has one."""
    import ast
    import importlib
    found = {}
    for path in sorted((ROOT / "exactattn").rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                parts = path.relative_to(ROOT).with_suffix("").parts
                module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                if isinstance(node.value, (ast.List, ast.Tuple)):
                    found[module] = len(node.value.elts)
                else:  # a computed list (exactattn.cost's): read it from the module
                    found[module] = len(importlib.import_module(module).__all__)
    return found


def test_the_public_surface_is_at_most_300_names():
    names = public_names()
    assert names["exactattn"] == len(exactattn.__all__)
    assert sum(names.values()) <= MAX_PUBLIC_NAMES, sorted(names.items(), key=lambda kv: -kv[1])[:10]
