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
