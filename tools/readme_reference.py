"""Write the README's generated reference blocks from taskboard.py's tables.

    .venv/bin/python tools/readme_reference.py

Each block stands between `<!-- generated: NAME -->` and `<!-- /generated -->` in README.md
and is made by taskboard.readme_reference() (settings, project fields, events): edit the
field tables' docs (or EVENT_TYPES), not the README, then run this. tests/test_docs.py
fails while a block differs from what the tables say.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import taskboard  # noqa: E402  (after its folder is on the path)

README = os.path.join(ROOT, "README.md")
BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(\n<!-- /generated -->)", re.S)


def blocks(text: str) -> dict[str, str]:
    """The generated blocks of a README text, by name."""
    return {m.group(2): m.group(3) for m in BLOCK.finditer(text)}


def regenerate(text: str) -> str:
    made = taskboard.readme_reference()
    missing = set(made) - set(blocks(text))
    if missing:
        raise SystemExit(f"README.md has no <!-- generated: NAME --> block for: "
                         f"{', '.join(sorted(missing))}")
    return BLOCK.sub(lambda m: m.group(1) + made.get(m.group(2), m.group(3)) + m.group(4),
                     text)


if __name__ == "__main__":
    with open(README, encoding="utf-8") as f:
        before = f.read()
    after = regenerate(before)
    if after != before:
        with open(README, "w", encoding="utf-8") as f:
            f.write(after)
    print("README.md:", "rewritten" if after != before else "already up to date")
