"""What a client generator needs from every /v1 operation beyond its own declarations, added once to the
built schema (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]):

- each path parameter's description, pattern and example (``PATH_PARAMETERS``, ``PUBLIC_IDS``);
- the signature headers of each notification in ``webhooks``;
- ``WWW-Authenticate`` on a 401 (``Request-Id``, on every answer, is the schema class's:
  ``schema.request_id_headers``);
- a success example on each operation's success answer, from ``success_examples.json`` (real answers of
  the contract walk, tests/smsgw/http/test_openapi_contract.py, with their ids, numbers and times made
  readable; the walk's test checks each still fits its schema).

It also warns (so ``spectacular --fail-on-warn``, run by deploy/test.sh, fails) about an operation without
a description of its own, a JSON success answer without an example, or a path parameter it cannot
document. tests/smsgw/http/test_openapi_documented.py says the same with the operation's name.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

from drf_spectacular.drainage import warn

METHODS = ("get", "put", "post", "patch", "delete")
SCOPE_LINE = "Requires the scope"  # what ApiAutoSchema.get_operation appends to every description
EXAMPLES_FILE = Path(__file__).with_name("success_examples.json")

# A public id is its resource's prefix and 24 lowercase hex digits (12 random bytes): new_public_id and its
# siblings in scheduling.models, scheduling.campaigns.models, retention.models, inbound.models.
# tests/smsgw/http/test_openapi_documented.py makes ids with them and matches them against these.
PUBLIC_IDS = {
    "/v1/messages/": ("msg_", "The message's id"),
    "/v1/schedules/": ("sch_", "The schedule's id"),
    "/v1/campaigns/": ("cmp_", "The campaign's id"),
    "/v1/exports/": ("exp_", "The export's id"),
    "/v1/inbound/": ("in_", "The inbound message's id"),
}
_EXAMPLE_HEX = "5f0c2a9b1d3e4f5a6b7c8d9e"

PATH_PARAMETERS = {
    "sender": {
        "description": "One of the tenant's senders: an E.164 number (URL-encode the `+` as `%2B`), a "
        "short code (3-8 digits), an alphanumeric sender id (1-11 characters, at least one letter) or a "
        "sender pool's id. Anything else is a 400 naming `sender`.",
        # The charset only: a sender pool's form is its provider's (smsgw.config.providers).
        "schema": {"type": "string", "pattern": r"^\+?[A-Za-z0-9 ]+$", "maxLength": 64},
        "example": "+14155550100",
    },
    "to": {
        "description": "The recipient in E.164 (URL-encode the `+` as `%2B`; a `+` left unencoded is "
        "read as one). A number that cannot be one is a 400 naming `to`.",
        "schema": {"type": "string", "pattern": r"^\+[1-9][0-9]{1,14}$"},
        "example": "+14155550123",
    },
    "webhook_id": {
        "description": "The notification's `webhook-id` (the header of its delivery, the same on every "
        "retry): `whmsg_` for a status change, `whin_` for a reply, `whcb_` for a status callback, and "
        "24 hex digits.",
        "schema": {"type": "string", "pattern": r"^wh(msg|in|cb)_[0-9a-f]{24}$"},
        "example": f"whmsg_{_EXAMPLE_HEX}",
    },
}

# The headers of every notification (receipts.webhooks signs in the Standard Webhooks form). drf-spectacular
# leaves a webhook's parameters out of the schema, so they are added here.
WEBHOOK_HEADERS = [
    {
        "name": "webhook-id",
        "in": "header",
        "required": True,
        "description": "The notification's id (`whmsg_...`, `whin_...`): the same on every retry and replay.",
        "schema": {"type": "string"},
    },
    {
        "name": "webhook-timestamp",
        "in": "header",
        "required": True,
        "description": "When this attempt was signed, in Unix seconds.",
        "schema": {"type": "integer"},
    },
    {
        "name": "webhook-signature",
        "in": "header",
        "required": True,
        "description": "`v1,<base64 HMAC-SHA256>`; several are space-separated (any one may match).",
        "schema": {"type": "string"},
    },
    {
        "name": "User-Agent",
        "in": "header",
        "required": True,
        "description": "`smsgw-webhooks/1`.",
        "schema": {"type": "string"},
    },
]

WWW_AUTHENTICATE = {
    "description": "`Bearer` (RFC 6750): the answer names the scheme the API expects.",
    "schema": {"type": "string"},
}


def contract_postprocess(result, generator, request, public, **kwargs):
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if method not in METHODS:
                continue
            where = f"{method.upper()} {path}"
            _path_parameters(where, path, operation)
            _headers(operation)
            _success_examples(where, method, path, operation)
            lead = operation.get("description", "").split(SCOPE_LINE)[0].strip()
            if not lead:
                warn(f"{where}: no description (extend_schema(description=...))")
    for operations in result.get("webhooks", {}).values():
        for operation in operations.values():
            operation["parameters"] = copy.deepcopy(WEBHOOK_HEADERS)
    return result


def path_parameter(path: str, name: str) -> dict | None:
    """The description, schema and example of the path parameter ``name`` in ``path``; None if unknown."""
    if name == "public_id":
        for prefix, (id_prefix, noun) in PUBLIC_IDS.items():
            if path.startswith(prefix):
                return {
                    "description": f"{noun}: `{id_prefix}` and 24 hex digits, as the API gave it. An id "
                    "of another tenant's object is a 404, as is an unknown one.",
                    "schema": {"type": "string", "pattern": f"^{id_prefix}[0-9a-f]{{24}}$"},
                    "example": f"{id_prefix}{_EXAMPLE_HEX}",
                }
        return None
    return copy.deepcopy(PATH_PARAMETERS.get(name))


def _path_parameters(where: str, path: str, operation: dict) -> None:
    for parameter in operation.get("parameters", []):
        if parameter.get("in") != "path":
            continue
        documented = path_parameter(path, parameter["name"])
        if documented is None:
            warn(f"{where}: path parameter {{{parameter['name']}}} has no description, pattern or example")
            continue
        parameter.update(documented)


def _headers(operation: dict) -> None:
    for code, response in operation.get("responses", {}).items():
        headers = response.setdefault("headers", {})
        if code == "401":
            headers.setdefault("WWW-Authenticate", copy.deepcopy(WWW_AUTHENTICATE))


@cache
def success_examples() -> dict:
    """``{"<METHOD> <path>": {"<status>": {"summary", "value"}}}``."""
    return json.loads(EXAMPLES_FILE.read_text())


def _success_examples(where: str, method: str, path: str, operation: dict) -> None:
    examples = success_examples().get(where, {})
    for code, response in operation.get("responses", {}).items():
        if not code.startswith("2"):
            continue
        media = (response.get("content") or {}).get("application/json")
        if media is None:  # no body (204), or a file
            continue
        example = examples.get(code)
        if example is not None:
            name = example["summary"].title().replace(" ", "")
            media.setdefault("examples", {})[name] = copy.deepcopy(example)
        elif not media.get("examples"):
            warn(f"{where}: no example of its {code} answer (smsgw/http/success_examples.json)")
