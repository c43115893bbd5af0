"""Retention: the room for what the gateway keeps, for how long, and in what form, opened empty.

Its first owner is the message-lifecycle issue (40): retention windows per tenant, redaction of bodies
and numbers once a message is final, export, pruning that keeps the history cheap, and a restore that
never sends twice. It is on the top floor beside ``reporting``: it acts on every app's tables (messages,
attempts, receipts, webhooks), and no app imports it.
"""
