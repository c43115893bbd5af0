"""The sandbox framework: what every provider's emulator (a standalone SMS provider the real SDK talks to
unchanged) is built from, and nothing that names a provider.

* ``listeners``: the API listener and the optional control-only listener (``Listeners``), with the
  ``refuse`` outage (the API port closed, the control port up).
* ``cli``: the command-line plumbing (``--flag`` and env per config field: ``add_config_flags``).
* ``config``: the checks of a config value (numbers, integers, booleans, lists) shared by the configs.
* ``app``: the control API's handlers (``SandboxApp``: ``/_sandbox/config``, stats, reset, replay, ...).
* ``responses``: the JSON response.
* ``callbacks``: the callback / receipt scheduler (``StatusCallbackHook``: copies, shuffle, drops, early
  callbacks, retries by policy, counters); a provider supplies the request each callback is.
* ``journal``: the store on disk (``Journal``: one JSON line per stored item); a provider supplies the
  record of an item.
* ``process``: running an emulator as a separate process (``SandboxProcess``) and ``unused_port``.
* ``gsm7``: the GSM-7 character tables.

Each provider's emulator lives in its package, ``delivery/providers/<name>/sandbox/``, and runs with
``python -m delivery.providers.<name>.sandbox``. This package must never import Django or a provider.
"""
