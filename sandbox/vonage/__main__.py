"""``python -m sandbox.vonage``: run the Vonage sandbox provider."""

from sandbox.vonage.server import main

if __name__ == "__main__":
    raise SystemExit(main())
