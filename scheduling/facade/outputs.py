"""The /v1 output serializers' public names, in one mixin (the HTTP edge: DRF is imported here, not in
``names``, which the services import too)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from scheduling.facade.names import public_fields


# No docstring: the schema takes a serializer's description from its classes' docstrings.
class PublicNames:
    # Put first in a /v1 output serializer's bases: its ``sender_pool`` field answers under the public
    # name (``SENDER_POOL_FIELD``, in the same place) and its ``from_number`` as ``from``, last, as the
    # messages, schedules and campaigns have always answered.

    def get_fields(self) -> dict[str, Any]:
        fields = public_fields(super().get_fields())  # type: ignore[misc]
        fields["from"] = serializers.CharField(source="from_number")
        return fields
