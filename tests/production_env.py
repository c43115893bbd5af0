"""The environment of a process started in production mode, for tests that start one: the caller's
environment without any SMSGW_/TWILIO_/VONAGE_/DJANGO_ setting, then a strong key, Twilio credentials and a
PostgreSQL URL nothing connects to. ``overrides`` set (or, given None, remove) variables on top."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def production_env(**overrides: str | None) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SMSGW_", "TWILIO_", "VONAGE_", "DJANGO_"))
    }
    env.update(
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/smsgw_unused",
        DJANGO_SETTINGS_MODULE="config.settings",
        SMSGW_VAR_DIR=os.environ.get("SMSGW_VAR_DIR", str(ROOT / ".var")),
        SMSGW_ENV="production",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        TWILIO_ACCOUNT_SID="AC" + secrets.token_hex(16),
        TWILIO_AUTH_TOKEN=secrets.token_hex(16),
        PYTHONUNBUFFERED="1",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
