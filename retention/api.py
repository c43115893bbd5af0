"""The tenant's daily exports (docs/exports.md): ``GET /v1/exports``, ``/v1/exports/{id}`` and
``/v1/exports/{id}/download``. One thin view per endpoint; retention.export_selectors reads."""

from __future__ import annotations

from django.core.files.storage import storages
from django.http import FileResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from retention import export_selectors as selectors
from retention.models import Export
from smsgw.domain_errors import NotFoundError
from smsgw.http import schema, strict_input
from smsgw.http.pagination import StrictCursorPagination

LIST_PARAMS = frozenset(("cursor", "page_size"))
CONTENT_TYPE = "application/gzip"


class ExportOutput(serializers.Serializer):
    id = serializers.CharField(source="public_id")
    day = serializers.DateField(help_text="The UTC day whose final messages it holds.")
    rows = serializers.IntegerField(help_text="Lines in the file: one per message (0: none that day).")
    size = serializers.IntegerField(help_text="Bytes of the gzip file.")
    sha256 = serializers.CharField(help_text="SHA-256 of the gzip file, hex.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(help_text="When it and its file are removed.")
    download_url = serializers.SerializerMethodField()

    def get_download_url(self, export: Export) -> str:
        return f"/v1/exports/{export.public_id}/download"


class ExportCursor(StrictCursorPagination):
    # Ids grow with the day for each tenant (a tenant's days are written in order): newest day first.
    ordering = "-id"


class ExportsApi(APIView):
    required_scopes = {"GET": "exports:read"}

    @extend_schema(
        parameters=[*schema.PAGE_PARAMETERS],
        responses=schema.paginated(ExportOutput, "ExportPage"),
        description=(
            "The tenant's daily exports of finished messages (one file a day, gzip-compressed JSON lines), "
            "newest day first, until each expires."
        ),
        summary="The daily exports (newest day first, cursor pages)",
    )
    def get(self, request):
        strict_input.query_params_check(request.query_params, LIST_PARAMS)
        qs = selectors.export_list(tenant=request.user.tenant, now=timezone.now())
        paginator = ExportCursor()
        page = paginator.paginate_queryset(qs, request, view=self)
        assert page is not None  # None only without a page size; StrictCursorPagination always has one
        return paginator.get_paginated_response(ExportOutput(page, many=True).data)


class ExportDetailApi(APIView):
    required_scopes = {"GET": "exports:read"}

    @extend_schema(
        responses=ExportOutput,
        description=(
            "One daily export: its day, rows, size, SHA-256 and when it expires, and its download URL."
        ),
        summary="One daily export",
    )
    def get(self, request, public_id: str):
        export = selectors.export_get(tenant=request.user.tenant, public_id=public_id, now=timezone.now())
        return Response(ExportOutput(export).data)


class ExportDownloadApi(APIView):
    required_scopes = {"GET": "exports:read"}

    @extend_schema(
        responses={
            # The bytes of a file: a schema with no JSON type (OpenAPI 3.1 describes binary content by its
            # media type alone; a "string" would be read as text).
            (200, CONTENT_TYPE): OpenApiResponse(
                {"contentMediaType": CONTENT_TYPE},
                description="The file: gzip-compressed JSON lines, one message a line (docs/exports.md).",
            )
        },
        parameters=[
            OpenApiParameter(
                "Content-Disposition",
                str,
                OpenApiParameter.HEADER,
                response=[200],
                description='`attachment; filename="<tenant>-<day>.jsonl.gz"`.',
            )
        ],
        description="The export's file, streamed: one message a line, as JSON. 404 once it expired.",
        summary="Download a daily export's file",
    )
    def get(self, request, public_id: str):
        tenant = request.user.tenant
        export = selectors.export_get(tenant=tenant, public_id=public_id, now=timezone.now())
        try:
            # Streamed in blocks by FileResponse, never read whole into memory.
            f = storages["exports"].open(export.name, "rb")
        except FileNotFoundError:
            # Its file was removed (an expired export a prune killed midway); the row goes next run.
            raise NotFoundError("This export's file is no longer there.") from None
        return FileResponse(
            f,
            as_attachment=True,
            filename=f"{tenant.slug}-{export.day.isoformat()}.jsonl.gz",
            content_type=CONTENT_TYPE,
        )
