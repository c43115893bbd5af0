"""Every gunicorn command the project ships (deploy/, docs/, bench/, tests/) runs without gunicorn's
control socket, or with one of its own. gunicorn 25.1+ opens one by default at a path per user
($XDG_RUNTIME_DIR/gunicorn.ctl, else ~/.gunicorn/gunicorn.ctl; gunicorn/config.py ``ControlSocket``):
a second gunicorn on the host (another instance, a staging stack, a test) unlinks and takes over the
first one's, so ``gunicornc`` would then talk to the wrong server. Nothing here uses it (the unit reloads
with SIGHUP), so every command says ``--no-control-socket``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SETTING = re.compile(r"--no-control-socket\b|--control-socket[= ]\S+")
# A shell-style command line: the gunicorn executable (any path) followed by its application.
COMMAND_LINE = re.compile(r"(?:^|[\s/:])gunicorn\s+(?:-\S+\s+)*config\.wsgi\b")
# An argv element that is the gunicorn executable: "gunicorn", ".../gunicorn", BIN / "gunicorn".
EXECUTABLE = re.compile(r"""['"](?:[^'"\s]*/)?gunicorn['"]""")
TEXT_FILES = ("*.md", "*.sh", "*.service", "Procfile", "*.py", "*.toml", "*.yml", "*.yaml", "*.cfg")
# Known launchers: the scan must find each of them (a scan that finds nothing proves nothing).
EXPECTED = {
    "deploy/Procfile",
    "deploy/systemd/smsgw-web.service",
    "docs/deploy.md",
    "bench/harness/devprocs.py",
    "tests/harness.py",
}


def _shipped_files() -> list[Path]:
    found: set[Path] = set()
    for pattern in TEXT_FILES:
        for path in ROOT.rglob(pattern):
            parts = path.relative_to(ROOT).parts
            if any(part.startswith(".") or part in ("node_modules", "__pycache__") for part in parts):
                continue  # .venv, .tools, .var, .git: not ours
            if path == Path(__file__).resolve():
                continue  # this file's own examples of commands without the setting
            found.add(path)
    return sorted(found)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with shell continuations (a trailing backslash) joined: (first line number, line)."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    if pending:
        out.append((start, pending))
    return out


def _text_commands(path: Path) -> list[tuple[int, str]]:
    return [
        (n, line) for n, line in _logical_lines(path.read_text(errors="replace")) if COMMAND_LINE.search(line)
    ]


def _argv_commands(path: Path) -> list[tuple[int, str]]:
    """List or tuple literals in Python source with the gunicorn executable as an element."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.List | ast.Tuple) and any(
            EXECUTABLE.search(ast.unparse(el)) for el in node.elts
        ):
            out.append((node.lineno, ast.unparse(node)))
    return out


def shipped_gunicorn_commands() -> dict[str, list[tuple[int, str]]]:
    commands: dict[str, list[tuple[int, str]]] = {}
    for path in _shipped_files():
        found = _text_commands(path)
        if path.suffix == ".py":
            found += _argv_commands(path)
        if found:
            commands[str(path.relative_to(ROOT))] = found
    return commands


def commands_without(pattern: re.Pattern[str]) -> list[str]:
    """Every shipped gunicorn command (each launcher the scan must find) that lacks ``pattern``."""
    commands = shipped_gunicorn_commands()
    assert set(commands) >= EXPECTED, f"launchers not found by the scan: {EXPECTED - set(commands)}"
    return [
        f"{name}:{line}: {command}"
        for name, found in commands.items()
        for line, command in found
        if not pattern.search(command)
    ]


def test_every_shipped_gunicorn_command_sets_its_control_socket():
    missing = commands_without(SETTING)
    assert not missing, (
        "gunicorn without --no-control-socket (or a --control-socket of its own):\n" + "\n".join(missing)
    )


def test_the_scan_sees_a_command_without_the_setting(tmp_path):
    """The checks themselves: a shell line, a continued line and an argv list without the flag are found."""
    shell = "exec .venv/bin/gunicorn config.wsgi --bind 127.0.0.1:8000 \\\n    --workers 2\n"
    assert [line for _, line in _logical_lines(shell) if COMMAND_LINE.search(line)] == [
        "exec .venv/bin/gunicorn config.wsgi --bind 127.0.0.1:8000      --workers 2"
    ]
    source = tmp_path / "launcher.py"
    source.write_text('ARGV = [str(BIN / "gunicorn"), "config.wsgi", "--workers", "2"]\n')
    (found,) = _argv_commands(source)
    assert not SETTING.search(found[1])
    source.write_text('ARGV = [str(BIN / "gunicorn"), "config.wsgi", "--no-control-socket"]\n')
    assert SETTING.search(_argv_commands(source)[0][1])


CONFIG = re.compile(r"--config[= ,'\"]+python:smsgw\.runtime\.gunicorn_conf\b")


def test_every_shipped_gunicorn_command_loads_the_projects_config():
    """Its request-line limit and its JSON error pages (smsgw.runtime.gunicorn_conf) apply wherever the
    web role runs: a command without it answers a long URL with gunicorn's HTML page."""
    missing = commands_without(CONFIG)
    assert not missing, "gunicorn without --config python:smsgw.runtime.gunicorn_conf:\n" + "\n".join(missing)
