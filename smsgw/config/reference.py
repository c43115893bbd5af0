"""The settings reference (docs/settings.md), made from the code itself: every environment variable the
gateway's code reads, with its type, default, bounds and the comment written above the line that reads it.

The scan is static (``ast`` over the Python sources, a pattern over the deploy scripts and units), so a
setting read only in production, or only with one broker, is found as surely as the others, and nothing is
imported. A read the scan cannot name (a variable's name computed at run time) is an error: the reference
must be complete, so such a read is written with its name spelled out. ``manage.py settings_reference``
writes the page; tests/smsgw/config/test_reference.py fails when the page differs from what the code says.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "settings.md"
# The packages whose code runs in the gateway's processes (and the deploy scripts' Python). The sandboxes
# (sandbox/ and each provider's sandbox/) are test tools with flags of their own (``--help``), and tests/
# and bench/ set variables for themselves (docs/testing.md).
PYTHON_ROOTS = ("config", "smsgw", "scheduling", "delivery", "receipts", "reporting", "retention", "inbound")
SKIPPED_PARTS = {"tests", "sandbox", "migrations", "__pycache__"}
# The typed readers (smsgw.config.env) and the type each one reads; the default is their second argument.
READERS = {
    "env_str": "string",
    "env_secret": "string",
    "env_bool": "boolean",
    "env_int": "integer",
    "env_float": "number",
    "env_list": "list",
    "env_pairs": "id:secret pairs",
    "env_choice": "choice",
    "env_json_object": "JSON object",
}
# The readers of secrets: also from NAME_FILE or the systemd credential NAME (smsgw.config.env). A
# structured reader reads a secret when called with ``secret=True``.
SECRET_READERS = {"env_secret"}
# The shell scripts and units that read variables of their own (the embedded run, the installer, systemd).
SHELL_FILES = ("deploy/run-embedded.sh", "deploy/bootstrap.sh", "deploy/systemd/*.service")
# A WSGI request's environ is read with the same .get(): its CGI variables are not settings.
CGI_VARIABLES = {
    "PATH_INFO",
    "REQUEST_METHOD",
    "QUERY_STRING",
    "CONTENT_TYPE",
    "CONTENT_LENGTH",
    "REMOTE_ADDR",
}
SHELL_PREFIXES = ("SMSGW_", "DJANGO_", "DATABASE_", "CELERY_")
_SHELL_READ = re.compile(r"\$\{(?P<name>[A-Z][A-Z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\}")
_UNIT_DEFAULT = re.compile(r"^Environment=(?P<pairs>.+)$")


class ScanError(Exception):
    """A read whose variable the scan cannot name."""


@dataclass
class Read:
    """One place that reads a variable."""

    name: str
    kind: str
    default: str
    bounds: str
    meaning: str
    where: str
    secret: bool = False


@dataclass
class Setting:
    name: str
    reads: list[Read] = field(default_factory=list)

    def first(self, attr: str) -> str:
        """The first non-empty value among the reads (Python before shell, in scan order)."""
        return next((getattr(r, attr) for r in self.reads if getattr(r, attr)), "")


# --- Python ---------------------------------------------------------------------------------------------


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "literal"`` assignments: a variable's name kept in a constant."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    out[target.id] = node.value.value
    return out


def _reader(call: ast.Call) -> str | None:
    """The reader a call is: one of READERS, or ``environ`` for os.environ.get / .setdefault, os.getenv and
    a kit's ``environ.get``."""
    func = call.func
    if isinstance(func, ast.Name) and func.id in READERS:
        return func.id
    if isinstance(func, ast.Attribute):
        if func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
            return "environ"
        if func.attr in ("get", "setdefault") and _is_environ(func.value):
            return "environ"
    return None


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _is_request(func: ast.expr, arg: ast.expr) -> bool:
    """A WSGI request's ``environ`` (its CGI variables), not the process's."""
    target = func.value if isinstance(func, ast.Attribute) and func.attr == "get" else func
    if not isinstance(target, ast.Name) or not isinstance(arg, ast.Constant):
        return False
    return str(arg.value).startswith(("HTTP_", "wsgi.")) or arg.value in CGI_VARIABLES


def _value_text(node: ast.expr | None, source: str) -> str:
    """A default as the page shows it: arithmetic evaluated (``48 * 3600`` is 172800), a literal as
    written, anything else (a value that depends on another setting) as its source."""
    if node is None:
        return ""
    if all(
        isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
        for n in ast.walk(node)
    ):
        value = eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})  # noqa: S307
        if isinstance(value, str):
            return f'"{value}"' if value == "" else value
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
            return f"{value:g}" if value < 1e6 else f"{value:.1f}"
        return f"{value:,}".replace(",", "_") if isinstance(value, int) and value >= 100_000 else str(value)
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in node.elts):
        return ",".join(str(e.value) for e in node.elts if isinstance(e, ast.Constant)) or '""'
    return f"`{ast.get_source_segment(source, node)}`"


def _comment_above(lines: list[str], lineno: int) -> str:
    """The comment block written directly above line ``lineno`` (1-based), section rules left out."""
    block: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#"):
        text = lines[i].strip().lstrip("#").strip()
        if text.startswith("---"):
            break
        block.insert(0, text)
        i -= 1
    return " ".join(t for t in block if t)


def _trailing_comment(line: str) -> str:
    _code, sep, comment = line.partition("  # ")
    return comment.strip() if sep and '"' not in comment and "noqa" not in comment else ""


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: Path, source: str, tree: ast.Module) -> None:
        self.path, self.source, self.lines = path, source, source.splitlines()
        self.constants = _constants(tree)
        self.reads: list[Read] = []
        self.stack: list[ast.AST] = []  # the statements and dict entries around the node being visited
        # The lines where a variable is read only when it is set (under ``if env_is_set(<name>)``): its
        # reader's default is never used there.
        self.guarded = [
            (arg.value, node.lineno, node.end_lineno or node.lineno)
            for node in ast.walk(tree)
            if isinstance(node, (ast.If, ast.IfExp))
            for call in ast.walk(node.test)
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "env_is_set"
            for arg in call.args
            if isinstance(arg, ast.Constant)
        ]

    def generic_visit(self, node: ast.AST) -> None:
        pushed = isinstance(node, ast.stmt)
        if pushed:
            self.stack.append(node)
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is not None:
                    self.stack.append(key)
                    self.visit(value)
                    self.stack.pop()
                    self.visit(key)
                else:
                    self.visit(value)
        else:
            super().generic_visit(node)
        if pushed:
            self.stack.pop()

    def visit_Subscript(self, node: ast.Subscript) -> None:  # os.environ[<name>]
        if (
            _is_environ(node.value)
            and isinstance(node.ctx, ast.Load)
            and not _is_request(node.value, node.slice)
        ):
            self._record(node, node.slice, "environ", None, [])
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        reader = _reader(node)
        if reader and node.args and not _is_request(node.func, node.args[0]):
            self._record(
                node, node.args[0], reader, node.args[1] if len(node.args) > 1 else None, node.keywords
            )
        self.generic_visit(node)

    def _meaning(self, anchor: ast.AST) -> str:
        """The comment directly above a statement or a dict entry. Only that one: a comment above the
        settings before it is about them (a setting with no comment of its own fails the test)."""
        return _comment_above(self.lines, anchor.lineno)  # type: ignore[attr-defined]

    def _record(
        self, node: ast.expr, arg: ast.expr, reader: str, default: ast.expr | None, keywords: list
    ) -> None:
        where = f"{self.path.relative_to(ROOT)}:{node.lineno}"
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            name = arg.value
        elif isinstance(arg, ast.Name) and arg.id in self.constants:
            name = self.constants[arg.id]
        else:
            raise ScanError(f"{where}: a variable read by a name the scan cannot resolve; spell it out")
        kw = {k.arg: k.value for k in keywords}
        bounds = ""
        if "minimum" in kw:
            bounds = f"≥ {_value_text(kw['minimum'], self.source)}"
        if reader == "env_choice" and isinstance(node, ast.Call) and len(node.args) > 2:
            choices = node.args[2]
            if isinstance(choices, (ast.Tuple, ast.List)):
                bounds = "one of " + ", ".join(
                    str(e.value) for e in choices.elts if isinstance(e, ast.Constant)
                )
            elif isinstance(choices, ast.Name):
                bounds = f"one of `{choices.id}`"
        kind = READERS.get(reader, "string")
        if reader == "env_bool" and default is None:
            default_text = "false"
        elif reader == "env_pairs":
            default_text = "none"
        else:
            default_text = _value_text(default, self.source) if default is not None else ""
        meaning = _comment_above(self.lines, node.lineno) or _trailing_comment(self.lines[node.lineno - 1])
        for anchor in reversed(self.stack):
            if meaning:
                break
            meaning = self._meaning(anchor)
        if any(n == name and first <= node.lineno <= last for n, first, last in self.guarded):
            default_text = "(unset: see meaning)"
        secret = reader in SECRET_READERS or (
            isinstance(kw.get("secret"), ast.Constant) and kw["secret"].value is True
        )
        self.reads.append(Read(name, kind, default_text, bounds, meaning, where, secret))


def python_reads() -> list[Read]:
    reads: list[Read] = []
    for root in PYTHON_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            if SKIPPED_PARTS & set(path.relative_to(ROOT).parts) or path == ROOT / "smsgw/config/env.py":
                continue
            source = path.read_text()
            tree = ast.parse(source)
            visitor = _Visitor(path, source, tree)
            visitor.visit(tree)
            reads += visitor.reads
    for path in sorted((ROOT / "deploy").glob("*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        visitor = _Visitor(path, source, tree)
        visitor.visit(tree)
        reads += visitor.reads
    return reads


# --- shell and units ------------------------------------------------------------------------------------


def shell_reads() -> list[Read]:
    reads: list[Read] = []
    for pattern in SHELL_FILES:
        for path in sorted(ROOT.glob(pattern)):
            lines = path.read_text().splitlines()
            for i, line in enumerate(lines, start=1):
                if line.lstrip().startswith("#"):
                    continue
                where = f"{path.relative_to(ROOT)}:{i}"
                if unit := _UNIT_DEFAULT.match(line):
                    for pair in unit["pairs"].split():
                        name, _, value = pair.partition("=")
                        meaning = _comment_above(lines, i)
                        reads.append(
                            Read(name, "string", value, "", meaning, f"{where} (the unit's default)")
                        )
                    continue
                for m in _SHELL_READ.finditer(line):
                    if not m["name"].startswith(SHELL_PREFIXES):
                        continue
                    default = m["default"] if m["op"] else ""
                    if m["op"] == "-":  # ${NAME-default}: set but empty is kept
                        default = f"{default} (set and empty: kept empty)"
                    meaning = _comment_above(lines, i)
                    reads.append(Read(m["name"], "string", default or "", "", meaning, where))
    return reads


# --- the page -------------------------------------------------------------------------------------------


def settings() -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for read in python_reads() + shell_reads():
        out.setdefault(read.name, Setting(read.name)).reads.append(read)
    return dict(sorted(out.items()))


def secret_names() -> list[str]:
    """The settings read as secrets (``SECRET_READERS``): each may come from ``NAME_FILE`` or the systemd
    credential ``NAME``, and the units load each credential (deploy/verify-units.sh checks)."""
    return [s.name for s in settings().values() if any(r.secret for r in s.reads)]


def _group(setting: Setting) -> str:
    """The page's section for a setting: where it is first read."""
    path = setting.reads[0].where.split(":")[0]
    parts = Path(path).parts
    if parts[0] == "config" and parts[1] == "settings":
        return f"config/settings/{parts[2]}"
    if parts[0] == "delivery" and parts[1] == "providers" and len(parts) > 3:
        return f"delivery/providers/{parts[2]}"
    if parts[0] == "deploy":
        return "deploy"
    return parts[0] + "/" + parts[1] if len(parts) > 2 else parts[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    groups: dict[str, list[Setting]] = {}
    for setting in settings().values():
        groups.setdefault(_group(setting), []).append(setting)
    out = [
        "# Settings reference",
        "",
        "<!-- Generated by `manage.py settings_reference` from the code (smsgw/config/reference.py): do not",
        "     edit; change the comment above the line that reads the setting, then run",
        "     `.venv/bin/python manage.py settings_reference --write`. A test fails when this page and the",
        "     code differ. -->",
        "",
        "Every environment variable the gateway's code reads, found by a scan of the code: the typed readers",
        "of `smsgw.config.env` (which refuse a bad value, naming the variable), `os.environ`, the deploy",
        "scripts and the systemd units. Each row gives the type, the default when the variable is unset, the",
        "bounds the reader enforces (a value outside them stops the process at start-up), what it means (the",
        "comment above the line that reads it) and where it is read. A default in `code` depends on other",
        "settings (most often on `SMSGW_ENV=production`). [Deploy](deploy.md#configuration) says which",
        "ones a production deployment sets. Not here: each provider sandbox's own flags (its `--help`:",
        "`.venv/bin/python -m delivery.providers.<name>.sandbox --help`) and the variables the test suite",
        "reads ([Running the tests](testing.md)).",
        "",
        "A type marked secret may also be handed over as a file: `NAME_FILE` holds the file's path (the",
        "Docker and Kubernetes convention), or systemd passes the credential `NAME` (`LoadCredential=` in",
        "the units: `$CREDENTIALS_DIRECTORY/NAME`); one source only ([Security](security.md#secrets)).",
        "",
        f"{sum(len(v) for v in groups.values())} settings.",
        "",
    ]
    for group, members in sorted(groups.items()):
        out += [
            f"## {group}",
            "",
            "| variable | type | default | bounds | meaning | read in |",
            "|---|---|---|---|---|---|",
        ]
        for s in members:
            # Files, not lines: a line number would change the page at every edit above it.
            files = dict.fromkeys(r.where.split(":")[0] for r in s.reads)
            where = "<br>".join(f"`{f}`" for f in files)
            default = s.first("default") or "(unset)"
            if not default.startswith(("`", "(")) and default != "none":
                default = f"`{default}`"
            secret = any(r.secret for r in s.reads)
            kind = s.first("kind") + (f"; secret (also `{s.name}_FILE`)" if secret else "")
            out.append(
                f"| `{s.name}` | {kind} | {_cell(default)} | {_cell(s.first('bounds'))} "
                f"| {_cell(s.first('meaning')).replace('<', '&lt;').replace('>', '&gt;')} | {where} |"
            )
        out.append("")
    return "\n".join(out)
