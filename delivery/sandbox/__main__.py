"""``python -m delivery.sandbox``: run the sandbox provider."""

from delivery.sandbox.server import main

if __name__ == "__main__":
    raise SystemExit(main())
