"""``python -m delivery.providers.twilio.sandbox``: run the Twilio sandbox provider."""

from delivery.providers.twilio.sandbox.server import main

if __name__ == "__main__":
    raise SystemExit(main())
