"""Print one of the README's two set-up commands, so CI runs them exactly as written.

    python3 .ci/readme_command.py main|test

The README marks each command with an HTML comment (`<!-- setup:main -->`,
`<!-- setup:test -->`) on the line before its fenced block; the block holds one line.
Standard library only: this runs before any environment exists.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
NAMES = ("main", "test")


def readme_command(name: str, text: str | None = None) -> str:
    text = README.read_text(encoding="utf-8") if text is None else text
    pattern = re.compile(r"<!-- setup:" + re.escape(name) + r" -->\s*\n```(?:bash|sh)?\n(.*?)\n```", re.S)
    found = pattern.findall(text)
    if len(found) != 1:
        raise SystemExit(f"README.md: expected one block marked setup:{name}, found {len(found)}")
    lines = [line for line in found[0].splitlines() if line.strip()]
    if len(lines) != 1:
        raise SystemExit(f"README.md: the setup:{name} block must hold one command line, not {len(lines)}")
    return lines[0].strip()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in NAMES:
        raise SystemExit(f"usage: {sys.argv[0]} {'|'.join(NAMES)}")
    print(readme_command(sys.argv[1]))
