"""Every pytest example in docs/*.md passes as a reader would run it.

Each fenced ```python block that defines a pytest test (``def test_``) is saved as a
file of its own and run with ``python -m pytest`` in a fresh directory, under
Hypothesis's default settings: the suite's profiles (tests/conftest.py) do not apply,
and neither do ``HYPOTHESIS_PROFILE`` or ``CI``, since a reader has none of them.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

pytestmark = pytest.mark.slow


def python_blocks(path: Path) -> list[tuple[int, int, str]]:
    """``(block index among the file's python blocks, line of its opening fence, code)``."""
    text = path.read_text(encoding="utf-8")
    return [(i, text.count("\n", 0, m.start()) + 1, m.group(1))
            for i, m in enumerate(FENCE.finditer(text))]


def example_blocks():
    """``(doc file name, block index)`` of every python block with a pytest test."""
    return [(doc.name, index) for doc in sorted(DOCS.glob("*.md"))
            for index, _, code in python_blocks(doc)
            if re.search(r"^\s*def test_", code, re.MULTILINE)]


def missing_modules(code: str) -> list[str]:
    """The top-level modules the block imports that are not installed (e.g. torch)."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return sorted(n for n in names if importlib.util.find_spec(n) is None)


def test_the_docs_have_pytest_examples():
    assert example_blocks(), "no ```python block with a def test_ found in docs/*.md"


@pytest.mark.parametrize("doc, index", example_blocks(),
                         ids=[f"{d}-{i}" for d, i in example_blocks()])
def test_doc_example_passes_under_default_settings(doc, index, tmp_path):
    (_, line, code), = [b for b in python_blocks(DOCS / doc) if b[0] == index]
    missing = missing_modules(code)
    if missing:
        pytest.skip(f"docs/{doc}:{line} needs {', '.join(missing)}, not installed")
    path = tmp_path / f"test_{Path(doc).stem}_{index}.py"
    path.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if k not in ("HYPOTHESIS_PROFILE", "CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(path)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (f"the example at docs/{doc}:{line} fails under "
                                  f"Hypothesis's default settings:\n{proc.stdout}{proc.stderr}")
