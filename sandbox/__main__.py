"""``python -m sandbox``: run the sandbox provider."""

from sandbox.server import main

if __name__ == "__main__":
    raise SystemExit(main())
