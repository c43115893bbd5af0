"""The suite's fixtures for every test folder: ``tests/`` and each provider package's own tests
(``delivery/providers/<name>/tests/``). ``tests/isolation.py`` is loaded before this (pyproject.toml's
``-p tests.isolation``); ``tests/fixtures.py`` holds the fixtures every test gets, ``tests/harness.py`` the
integration harness (real worker, beat, web and sandbox processes)."""

pytest_plugins = ["tests.fixtures", "tests.harness"]
