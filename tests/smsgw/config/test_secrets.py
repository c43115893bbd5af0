"""Secrets as deployments hand them over (smsgw.config.env.env_secret): the variable, a file named by
NAME_FILE (Docker and Kubernetes secrets), or a systemd credential in $CREDENTIALS_DIRECTORY. One source
only, and an error names the variable and the file, never the content."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from smsgw.config import reference
from smsgw.config.env import env_json_object, env_pairs, env_secret

ROOT = Path(__file__).resolve().parents[3]
NAME = "SMSGW_TEST_SECRET"
VALUE = "s3cr3t-value with spaces"


@pytest.fixture
def clean(monkeypatch):
    for name in (NAME, f"{NAME}_FILE", "CREDENTIALS_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_file_named_by_name_file_is_the_value_without_its_final_newline(clean, tmp_path):
    (tmp_path / "secret").write_text(VALUE + "\n")
    clean.setenv(f"{NAME}_FILE", str(tmp_path / "secret"))
    assert env_secret(NAME) == VALUE
    (tmp_path / "secret").write_text(f" {VALUE}\n\n")  # only the one newline an editor or echo adds goes
    assert env_secret(NAME) == f" {VALUE}\n"


def test_the_variable_itself_and_the_default_still_work(clean):
    assert env_secret(NAME, "the-default") == "the-default"
    clean.setenv(NAME, VALUE)
    assert env_secret(NAME, "the-default") == VALUE


def test_both_the_variable_and_its_file_is_an_error_naming_both(clean, tmp_path):
    (tmp_path / "secret").write_text("from-the-file")
    clean.setenv(NAME, VALUE)
    clean.setenv(f"{NAME}_FILE", str(tmp_path / "secret"))
    with pytest.raises(ImproperlyConfigured) as refused:
        env_secret(NAME)
    message = str(refused.value)
    assert NAME in message and f"{NAME}_FILE" in message
    assert VALUE not in message and "from-the-file" not in message


@pytest.mark.parametrize("case", ["missing", "a folder", "not text"])
def test_an_unreadable_file_is_an_error_naming_the_variable_never_the_content(clean, tmp_path, case):
    path = tmp_path / "secret"
    if case == "a folder":
        path.mkdir()
    elif case == "not text":
        path.write_bytes(b"\xff\xfe" + VALUE.encode())
    clean.setenv(f"{NAME}_FILE", str(path))
    with pytest.raises(ImproperlyConfigured) as refused:
        env_secret(NAME)
    message = str(refused.value)
    assert f"{NAME}_FILE" in message and str(path) in message
    assert VALUE not in message
    # Raised ``from None``: a traceback shows no decoding error quoting the bytes read.
    assert refused.value.__cause__ is None and refused.value.__suppress_context__


def test_a_systemd_credential_is_read_from_the_credentials_directory(clean, tmp_path):
    (tmp_path / NAME).write_text(VALUE + "\n")
    clean.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    assert env_secret(NAME) == VALUE
    clean.setenv(NAME, "left-in-the-env-file")  # the same secret twice: refused, naming both
    with pytest.raises(ImproperlyConfigured, match=rf"{NAME} and the systemd credential {NAME}") as refused:
        env_secret(NAME)
    assert VALUE not in str(refused.value) and "left-in-the-env-file" not in str(refused.value)
    clean.delenv(NAME)
    (tmp_path / NAME).unlink()  # a unit loads every secret's credential; an absent one is just unset
    assert env_secret(NAME, "the-default") == "the-default"


def test_structured_secrets_come_from_files_too(clean, tmp_path):
    (tmp_path / "keys").write_text("key1:secret1,key2:secret2\n")
    clean.setenv(f"{NAME}_FILE", str(tmp_path / "keys"))
    assert env_pairs(NAME, secret=True) == {"key1": "secret1", "key2": "secret2"}
    assert env_pairs(NAME) == {}  # not a secret reader: the file is not looked at
    (tmp_path / "keys").write_text('{"access_key": "AKIA", "secret_key": "x"}\n')
    assert env_json_object(NAME, {}, secret=True) == {"access_key": "AKIA", "secret_key": "x"}


def test_the_reference_marks_every_secret_and_names_its_file_form():
    names = reference.secret_names()
    for name in (
        "DJANGO_SECRET_KEY",
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "SMSGW_METRICS_TOKEN",
        "TWILIO_AUTH_TOKEN",
        "TWILIO_AUTH_TOKEN_PREVIOUS",
        "TWILIO_API_KEY_SECRET",
        "TWILIO_WEBHOOK_SHARED_KEYS",
        "VONAGE_API_SECRET",
        "VONAGE_SIGNATURE_SECRET",
        "VONAGE_SIGNATURE_SECRET_PREVIOUS",
    ):
        assert name in names
        assert f"| `{name}` | " in reference.PAGE.read_text()
    row = next(
        line for line in reference.PAGE.read_text().splitlines() if line.startswith("| `DJANGO_SECRET_KEY`")
    )
    assert "secret (also `DJANGO_SECRET_KEY_FILE`)" in row
    assert "SMSGW_LOG_LEVEL" not in names


def _settings_process(env: dict[str, str]) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.SECRET_KEY, settings.METRICS_TOKEN, settings.TWILIO_AUTH_TOKEN, sep='|')"
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SMSGW_", "TWILIO_"))}
    base.pop("DATABASE_URL", None)
    base.pop("CELERY_BROKER_URL", None)
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "config.settings", "SMSGW_ENV": "test", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_settings_take_their_secrets_from_files_and_refuse_two_sources(tmp_path):
    """The real settings module, in a process of its own: the secret key and the metrics token from
    NAME_FILE, the Auth Token from a systemd credential; then one secret given twice stops start-up."""
    key = "k" * 30 + "-from-a-file-0123456789abcdef"
    (tmp_path / "key").write_text(key + "\n")
    (tmp_path / "metrics").write_text("metrics-token-from-a-file\n")
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "TWILIO_AUTH_TOKEN").write_text("auth-token-from-a-credential")
    env = {
        "SMSGW_VAR_DIR": str(tmp_path / "var"),
        "DJANGO_SECRET_KEY_FILE": str(tmp_path / "key"),
        "SMSGW_METRICS_TOKEN_FILE": str(tmp_path / "metrics"),
        "CREDENTIALS_DIRECTORY": str(creds),
    }
    done = _settings_process(env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{key}|metrics-token-from-a-file|auth-token-from-a-credential"

    twice = _settings_process({**env, "DJANGO_SECRET_KEY": "another-key-in-the-env-file"})
    assert twice.returncode != 0
    assert (
        "DJANGO_SECRET_KEY is set more than once: DJANGO_SECRET_KEY and DJANGO_SECRET_KEY_FILE"
        in twice.stderr
    )
    assert key not in twice.stderr and "another-key-in-the-env-file" not in twice.stderr
