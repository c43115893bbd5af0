"""A sandbox's command line: the value of a flag from the environment (``_env``) and a ``--flag`` per
field of its config (``add_config_flags``). Must not import Django.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from typing import Any

from sandbox.config import REFUSE_NEEDS_CONTROL, _as_int, as_bool, as_list


def _env(name: str, default: Any) -> Any:
    value = os.environ.get(name)
    return default if value in (None, "") else value


def _flag_bool(value: Any) -> bool:
    try:
        return as_bool("flag", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_list(value: Any) -> list[str]:
    try:
        return as_list("flag", value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _flag_port(value: Any) -> int | None:
    if value is None or str(value).strip().lower() in ("", "none"):
        return None
    try:
        return _as_int("port", value, 0, 65535)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_config_flags(p: argparse.ArgumentParser, config_cls: type, env_prefix: str) -> None:
    """A ``--flag`` (and env ``<env_prefix>NAME``) per field of a sandbox's config dataclass, typed by the
    key tables of the module that defines it (``_INT_RANGES``, ``_BOOL_KEYS``, ``_STR_KEYS``,
    ``_CHOICE_KEYS``, ``_LIST_KEYS``; any other field is a float); ``rules`` is left to the caller."""
    keys = sys.modules[config_cls.__module__]
    defaults = config_cls()

    def kind_of(name: str) -> Any:
        if name in keys._INT_RANGES:
            return int
        if name in keys._BOOL_KEYS:
            return _flag_bool
        if name in keys._STR_KEYS or name in keys._CHOICE_KEYS:
            return str
        if name in keys._LIST_KEYS:
            return _flag_list
        return float

    for f in fields(config_cls):
        if f.name == "rules":
            continue
        env = env_prefix + f.name.upper()
        kind = kind_of(f.name)
        p.add_argument(
            "--" + f.name.replace("_", "-"),
            type=kind,
            default=kind(_env(env, getattr(defaults, f.name))),
            help=f"(env {env})" + (" JSON list or comma-separated" if f.name in keys._LIST_KEYS else ""),
        )


def config_from_args(args: argparse.Namespace, config_cls: Any, label: str) -> Any:
    """The config the flags (``add_config_flags``) and ``--rules`` describe, checked as the control API
    checks an update; a bad value, or ``outage refuse`` without a control port, ends the process naming
    the sandbox (``label``)."""
    try:
        config = config_cls().updated(
            {
                **{f.name: getattr(args, f.name) for f in fields(config_cls) if f.name != "rules"},
                "rules": json.loads(args.rules),
            }
        )
    except ValueError as exc:
        raise SystemExit(f"{label}: bad configuration: {exc}") from None
    if config.outage == "refuse" and args.control_port is None:
        raise SystemExit(f"{label}: bad configuration: {REFUSE_NEEDS_CONTROL}")
    return config
