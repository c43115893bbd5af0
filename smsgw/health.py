from django.db import connection
from django.http import JsonResponse


def healthz(request):
    return JsonResponse({"status": "ok"})


def readyz(request):
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
    except Exception as exc:  # readiness reports, it does not raise
        return JsonResponse({"status": "unavailable", "database": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ok", "database": connection.vendor})
