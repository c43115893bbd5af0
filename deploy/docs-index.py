#!/usr/bin/env python3
"""docs/index.md, the documentation site's start page, made from README.md so the two never tell different
stories: the README's links into docs/ become the site's links, and a link to a file outside docs/ (LICENSE,
CHANGELOG.md, a folder) keeps its text without the link (the site has no such page).

    .venv/bin/python deploy/docs-index.py           write docs/index.md
    .venv/bin/python deploy/docs-index.py --check   exit 1 when docs/index.md differs from README.md's

tests/smsgw/test_docs_index.py runs the check; mkdocs build --strict checks every link it leaves.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"
HEADER = (
    "<!-- Made from README.md by deploy/docs-index.py: edit README.md, then run\n"
    "     `.venv/bin/python deploy/docs-index.py` (a test fails when the two differ). -->\n\n"
)
# [text](target): targets with a scheme or an anchor only are left alone.
_LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<target>[^)\s]+)\)")


def _link(match: re.Match) -> str:
    text, target = match["text"], match["target"]
    if re.match(r"[a-z]+:", target) or target.startswith("#"):
        return match[0]
    if target.startswith("docs/") and target.split("#")[0].endswith(".md"):
        return f"[{text}]({target.removeprefix('docs/')})"
    return text  # a file or folder of the repository the site does not publish


def render(readme: str) -> str:
    return HEADER + _LINK.sub(_link, readme)


def main(argv: list[str]) -> int:
    page = render(README.read_text())
    if argv[1:] == ["--check"]:
        if INDEX.read_text() != page:
            print("docs/index.md differs from README.md: run deploy/docs-index.py", file=sys.stderr)
            return 1
        return 0
    INDEX.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
