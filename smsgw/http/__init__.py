"""The HTTP edge: the API boundary against hostile input, the one error envelope and the handler that maps
domain errors to it, the 503 of a database outage, strict input types, cursor pages, the OpenAPI schema
and docs, liveness, static files."""
