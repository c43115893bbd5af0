"""The floor on the interpreter's patch level: pyproject.toml's requires-python and deploy/bootstrap.sh
agree on it, it is at least 3.12.6 (the ipaddress and cookie-parsing security fixes), and the bootstrap
refuses an older interpreter with a message naming the floor, before it installs anything.

The bootstrap runs from a copy in a temporary folder with stand-in interpreters (shell scripts that
answer the version question as a given release would), so a broken check could never reach the real
.venv; its refusal is all these tests can observe there."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "deploy" / "bootstrap.sh"


def _floor() -> tuple[int, ...]:
    text = BOOTSTRAP.read_text()
    found = re.search(r"^MIN_PYTHON=(\d+\.\d+\.\d+)$", text, re.M)
    assert found, "deploy/bootstrap.sh sets MIN_PYTHON"
    return tuple(int(p) for p in found.group(1).split("."))


def test_pyproject_and_the_bootstrap_share_one_floor_with_the_security_fixes():
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert requires == ">=" + ".".join(map(str, _floor()))
    assert _floor() >= (3, 12, 6), (
        "3.12.4: ipaddress is_private (CVE-2024-4032); 3.12.6: cookies (CVE-2024-7592)"
    )
    lock = (ROOT / "uv.lock").read_text()
    assert f'requires-python = "{requires}"' in lock, "uv.lock was made for the same floor"


def _stand_in(folder: Path, name: str, version: str) -> Path:
    """A 'python' that answers the bootstrap's version question as ``version`` would, and fails at
    anything else (creating a venv, installing)."""
    path = folder / name
    path.write_text(f'#!/bin/sh\ncase "$*" in *version_info*) echo {version}; exit 0;; esac\nexit 97\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _bootstrap(tmp_path: Path, **env) -> subprocess.CompletedProcess:
    (tmp_path / "deploy").mkdir()
    shutil.copy(BOOTSTRAP, tmp_path / "deploy" / "bootstrap.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    dirname = shutil.which("dirname")
    assert dirname
    (bin_dir / "dirname").symlink_to(dirname)  # the only program it runs before choosing a Python
    clean = {
        "PATH": str(bin_dir),  # no interpreter of this machine's: only the stand-ins
        "HOME": str(tmp_path),  # no pyenv installs found through $HOME
        "PYENV_ROOT": str(tmp_path / "no-pyenv"),
        **env,
    }
    bash = shutil.which("bash")
    assert bash
    return subprocess.run(
        [bash, str(tmp_path / "deploy" / "bootstrap.sh")],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_bootstrap_refuses_an_interpreter_below_the_floor_by_name(tmp_path):
    old = _stand_in(tmp_path, "python3.12.1", "3.12.1")
    done = _bootstrap(tmp_path, SMSGW_PYTHON=str(old))
    assert done.returncode != 0
    assert "needs Python >= 3.12.6" in done.stderr and "is 3.12.1" in done.stderr, done.stderr
    assert not (tmp_path / ".tools").exists() and not (tmp_path / ".venv").exists(), "nothing installed"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_without_a_new_enough_interpreter_it_names_what_it_found(tmp_path):
    (tmp_path / "bin").mkdir()
    _stand_in(tmp_path / "bin", "python3.12", "3.12.5")
    _stand_in(tmp_path / "bin", "python3", "3.11.7")
    done = _bootstrap(tmp_path)
    assert done.returncode != 0
    assert "needs Python >= 3.12.6" in done.stderr, done.stderr
    assert "python3.12=3.12.5" in done.stderr and "python3=3.11.7" in done.stderr, done.stderr
    assert not (tmp_path / ".tools").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("version", ["3.12.6", "3.12.10", "3.13.0", "3.14.2"])
def test_an_interpreter_at_or_above_the_floor_is_taken(tmp_path, version):
    """Taken: the bootstrap goes on to make its tools' venv with it (where the stand-in fails, 97)."""
    (tmp_path / "bin").mkdir()
    _stand_in(tmp_path / "bin", "python3.13", version)
    done = _bootstrap(tmp_path)
    assert "needs Python" not in done.stderr, done.stderr
    assert done.returncode == 97, (done.returncode, done.stderr)
