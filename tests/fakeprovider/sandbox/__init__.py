"""The fake provider's sandbox: its API as a real HTTP server (``python -m tests.fakeprovider.sandbox``)."""
