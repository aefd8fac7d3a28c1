"""The table of which path takes which modifier, in docs/modifiers.md and docs/gradients.md,
is the policy's one capability table (``exactattn.call.policy.UNSUPPORTED``) written out.

Each page's section "Which path takes which modifier" holds the table :func:`table` writes;
a path added to UNSUPPORTED, or a modifier added to the policy, fails here until the pages
show it.  ``python tests/package/test_docs_capabilities.py`` prints the table to paste.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exactattn.call.policy import MODIFIER_FIELDS, UNSUPPORTED

ROOT = Path(__file__).resolve().parents[2]
HEADING = "## Which path takes which modifier"
#: a modifier field of the policy -> its column (a new field without one fails here)
COLUMNS = {"window": "window", "query_offset": "query offset", "rope": "RoPE",
           "softcap": "soft-cap", "alibi": "ALiBi", "sink": "sink", "dropout": "dropout"}
#: a row of the pages -> its path (None: the forward; a path not in UNSUPPORTED runs every field)
ROWS = {
    "forward: `Reference`, the tables, `verify`": None,
    "exact backward: `Reference(...).gradients`, `verify --backward`": "gradients",
    "numpy float backward: `verify --impl numpy --backward`": "numpy_backward",
    "row blocks: `blocks`, `exactattn.blocks.certify`": "blocks",
    "blocked check of a float kernel: `blocks --check`, `verify --memory`": "sdpa",
    "split-merge: `verify --split-merge`": "split",
    "fast engine: `engine=\"fast\"`": "fast",
    "flex: `verify --impl flex`": "flex",
    "flash-attn: `verify --impl flash-attn`": "flash_attn",
    "jax: `verify --impl jax`": "jax",
}
#: paths of UNSUPPORTED the pages leave out, and why
NOT_SHOWN = {
    "enclose": "not a path a user picks: the float64 enclosure behind verify's proved "
               "tolerance, which falls back to the default rule where it refuses",
}


def table() -> list[str]:
    """The markdown lines of the table: a row per path, ``yes`` or ``no`` per modifier."""
    fields = [f for f in MODIFIER_FIELDS if f != "head"]
    lines = ["| path | " + " | ".join(COLUMNS[f] for f in fields) + " |",
             "|---" * (len(fields) + 1) + "|"]
    for label, path in ROWS.items():
        refused = UNSUPPORTED.get(path, ())
        lines.append(f"| {label} | " + " | ".join("no" if f in refused else "yes"
                                                  for f in fields) + " |")
    return lines


def shown(page: str) -> list[str]:
    """The first table under the page's capability heading."""
    text = (ROOT / page).read_text(encoding="utf-8")
    assert HEADING in text, f"{page} has no section {HEADING!r}"
    lines = text.split(HEADING, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def test_every_path_of_the_capability_table_is_shown_or_left_out_for_a_reason():
    assert not set(UNSUPPORTED) - set(ROWS.values()) - set(NOT_SHOWN)


@pytest.mark.parametrize("page", ["docs/modifiers.md", "docs/gradients.md"])
def test_the_pages_table_is_the_capability_table(page):
    assert shown(page) == table(), "paste:\n" + "\n".join(table())


if __name__ == "__main__":
    print("\n".join(table()))
