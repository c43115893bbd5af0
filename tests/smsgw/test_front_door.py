"""The front door: docs/index.md is the README (made from it by deploy/docs-index.py), the README's quick
start is written for any POSIX shell on Linux and macOS (tests/integration/test_embedded.py runs it against
a real embedded run), and the repository carries the licence pyproject.toml declares and a changelog."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _quick_start() -> str:
    start = README.index("## Try it (embedded mode)")
    section = README[start : README.index("\n## ", start + 1)]
    return "\n".join(re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL))


def test_the_site_start_page_is_made_from_the_readme():
    done = subprocess.run(
        [sys.executable, "deploy/docs-index.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_the_quick_start_needs_no_gnu_tool_and_no_copied_id():
    script = _quick_start()
    assert script.count("\n") > 40, script  # the section is still there
    # GNU-only: date -d, sed -i without a suffix, readlink -f, grep -P; nor jq, which macOS lacks.
    for gnu in (r"\bdate\s+[-+]", r"sed -i", r"readlink -f", r"grep -P", r"\bjq\b"):
        assert not re.search(gnu, script), gnu
    # Ids are captured from the answers, never written in by hand.
    assert not re.search(r"(msg|SM|in)_?\.\.\.", script)
    assert re.search(r"ID=\$\(curl", script)


def test_the_quick_start_shows_what_it_prints():
    start = README.index("## Try it (embedded mode)")
    section = README[start : README.index("\n## ", start + 1)]
    shown = "\n".join(re.findall(r"```text\n(.*?)```", section, flags=re.DOTALL))
    assert re.search(r"msg_[0-9a-f]{24} delivered", shown), shown


def test_the_licence_is_the_one_pyproject_declares():
    assert 'license = "Apache-2.0"' in (ROOT / "pyproject.toml").read_text()
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_changelog_keeps_its_format():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "keepachangelog.com" in text and "## [Unreleased]" in text
