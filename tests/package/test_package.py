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
