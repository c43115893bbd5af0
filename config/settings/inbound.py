"""Two-way messaging (docs/inbound.md): what recipients send back."""

from __future__ import annotations

from pathlib import Path

from config.settings.environment import VAR_DIR
from smsgw.config.env import env_float, env_int, env_str

# Inbound messages whose webhook arrives while the database is unreachable wait here (inbound.spool): a
# persistent disk local to the web process, like the receipt spool.
INBOUND_SPOOL_DIR = Path(env_str("SMSGW_INBOUND_SPOOL_DIR", str(VAR_DIR / "inbound-spool")))
# Inbound messages one processing batch takes (inbound.process): each costs a few indexed reads and one
# webhook row, so a batch stays well under a second.
INBOUND_BATCH_SIZE = env_int("SMSGW_INBOUND_BATCH_SIZE", 200, minimum=1)
# The parts of a long message may come in any order and some may never come: after this long from its
# first part, a message is made of the parts that came, the missing ones named (inbound.parts).
INBOUND_PARTS_WAIT_SECONDS = env_float("SMSGW_INBOUND_PARTS_WAIT_SECONDS", 300.0, minimum=1)
# How far back the message a reply answers is looked for (its in_reply_to): the last message sent on
# the same number pair within this many days.
INBOUND_REPLY_WINDOW_DAYS = env_int("SMSGW_INBOUND_REPLY_WINDOW_DAYS", 30, minimum=1)
