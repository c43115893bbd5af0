"""``python -m delivery.providers.vonage.sandbox``: run the Vonage sandbox provider."""

from delivery.providers.vonage.sandbox.server import main

if __name__ == "__main__":
    raise SystemExit(main())
