"""The systemd units can write what smsgw writes: they run as the `smsgw` user over a checkout that root
owns (/opt/smsgw), so every path the settings write must be under SMSGW_VAR_DIR, and SMSGW_VAR_DIR must be
the units' StateDirectory (/var/lib/smsgw, made by systemd and owned by User=). deploy/verify-units.sh
checks the units (deploy/test.sh runs it); these tests check that the settings keep their side of it and
that the script refuses a unit without it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.production_env import production_env

ROOT = Path(__file__).resolve().parents[3]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))
STATE = "/var/lib/smsgw"


def _directives(unit: Path) -> list[tuple[str, str]]:
    out = []
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.append((key, value))
    return out


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_a_unit_running_as_smsgw_has_its_state_directory_as_the_var_folder(unit):
    d = _directives(unit)
    assert ("User", "smsgw") in d
    assert ("StateDirectory", "smsgw") in d, unit.name
    assert ("Environment", f"SMSGW_VAR_DIR={STATE}") in d, unit.name
    # The checkout is the working directory, never a place written to.
    assert ("WorkingDirectory", "/opt/smsgw") in d
    for _, value in d:
        assert not re.search(r"--(?:pidfile|logfile|state-file|schedule)[ =]/opt/", value), value


def test_every_path_the_settings_write_is_under_the_var_folder(tmp_path):
    var = tmp_path / "var"
    code = (
        "import django, json, os; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([str(s.STATIC_ROOT), str(s.RECEIPT_SPOOL_DIR), str(s.INBOUND_SPOOL_DIR), "
        "str(s.EXPORT_DIR), os.environ['PROMETHEUS_MULTIPROC_DIR']]))"
    )
    env = production_env(SMSGW_VAR_DIR=str(var), PROMETHEUS_MULTIPROC_DIR=None)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    paths = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(Path(p).is_relative_to(var) for p in paths), paths


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_verify_units_refuses_a_unit_that_cannot_write_its_var_folder(tmp_path):
    """The script as CI runs it, on a copy of deploy/ whose web unit lost its StateDirectory."""
    (tmp_path / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "verify-units.sh", tmp_path / "deploy")
    shutil.copytree(ROOT / "deploy" / "systemd", tmp_path / "deploy" / "systemd")
    os.symlink(ROOT / ".venv", tmp_path / ".venv")
    os.symlink(ROOT / "smsgw", tmp_path / "smsgw")  # the secret settings' names (smsgw.config.reference)
    script = [str(tmp_path / "deploy" / "verify-units.sh")]
    ok = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    web = tmp_path / "deploy" / "systemd" / "smsgw-web.service"
    web.write_text(web.read_text().replace("StateDirectory=smsgw\n", ""))
    refused = subprocess.run(script, capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0
    assert "smsgw-web.service runs as smsgw without StateDirectory=smsgw" in refused.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_verify_units_refuses_a_unit_that_does_not_load_a_secret_as_a_credential(tmp_path):
    """Every secret setting may be a systemd credential: a unit that forgot one is refused, by name."""
    (tmp_path / "deploy").mkdir()
    shutil.copy(ROOT / "deploy" / "verify-units.sh", tmp_path / "deploy")
    shutil.copytree(ROOT / "deploy" / "systemd", tmp_path / "deploy" / "systemd")
    os.symlink(ROOT / ".venv", tmp_path / ".venv")
    os.symlink(ROOT / "smsgw", tmp_path / "smsgw")
    worker = tmp_path / "deploy" / "systemd" / "smsgw-worker@.service"
    line = "LoadCredential=TWILIO_AUTH_TOKEN_PREVIOUS:smsgw.TWILIO_AUTH_TOKEN_PREVIOUS\n"
    assert line in worker.read_text()
    worker.write_text(worker.read_text().replace(line, ""))
    refused = subprocess.run(
        [str(tmp_path / "deploy" / "verify-units.sh")], capture_output=True, text=True, timeout=120
    )
    assert refused.returncode != 0
    assert "smsgw-worker@.service does not load the credential TWILIO_AUTH_TOKEN_PREVIOUS" in refused.stderr
