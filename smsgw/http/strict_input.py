"""JSON input is taken at its documented type. DRF's fields coerce: a CharField takes 0 as "0", a
BooleanField takes 0, "yes" or "off", an IntegerField takes "120" and 120.0. The OpenAPI schema says
string, boolean, integer, so a client that sends another type has a bug we should name (400 naming the
field), not guess around: a number where the body text should be is not a message anyone meant to send."""

from __future__ import annotations

from collections.abc import Mapping

from rest_framework import serializers

MUST_BE = {
    "string": "must be a string",
    "boolean": "must be true or false",
    "integer": "must be a whole number (not a string)",
    "number": "must be a number (not a string)",
    "array": "must be a list",
}


def _kind(field: serializers.Field) -> str | None:
    if isinstance(field, serializers.BooleanField):
        return "boolean"
    if isinstance(field, serializers.IntegerField):
        return "integer"
    if isinstance(field, serializers.FloatField | serializers.DecimalField):
        return "number"
    if isinstance(field, serializers.CharField | serializers.ChoiceField):
        return "string"
    if isinstance(field, serializers.ListField):
        return "array"
    return None  # JSONField, DictField (DRF already refuses a non-object) and the like


def _fits(kind: str, value) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return isinstance(value, list)


def json_type_errors(fields: Mapping[str, serializers.Field], data: Mapping) -> dict[str, list[str]]:
    """{field: [why]} for each value in ``data`` whose JSON type is not its declared field's. A null is
    left to the field (allow_null decides), as are unknown keys."""
    errors: dict[str, list[str]] = {}
    for name, value in data.items():
        field = fields.get(name)
        if field is None or value is None:
            continue
        kind = _kind(field)
        if kind is None:
            continue
        if not _fits(kind, value):
            errors[name] = [MUST_BE[kind]]
        elif (
            kind == "array"
            and isinstance(field, serializers.ListField)  # always, for "array"; narrows for .child
            and (child := _kind(field.child))
            and not all(_fits(child, v) for v in value)
        ):
            errors[name] = [f"each item {MUST_BE[child]}"]
    return errors


class JsonTypedSerializer(serializers.Serializer):
    """A serializer that refuses a value of another JSON type than its field's (``json_type_errors``)."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping) and (wrong_type := json_type_errors(self.fields, data)):
            raise serializers.ValidationError(wrong_type)
        return super().to_internal_value(data)


class ClosedJsonSerializer(JsonTypedSerializer):
    """As JsonTypedSerializer, and a key it does not know is a 400 naming it (the name cut short: it is
    whatever the client sent), so a typo never silently does something else."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({k[:64]: ["unknown field"] for k in unknown[:10]})
        return super().to_internal_value(data)


def query_params_check(params: Mapping, allowed: frozenset[str]) -> None:
    """A query parameter a list does not know is a 400 naming it: ``?stauts=sent`` must not silently
    answer every message, as an unknown body key must not silently send now."""
    unknown = sorted(name for name in params if name not in allowed)
    if unknown:
        # The name is echoed (it is the field to correct), cut short: it is whatever the client sent.
        raise serializers.ValidationError({name[:64]: ["unknown query parameter"] for name in unknown[:10]})
