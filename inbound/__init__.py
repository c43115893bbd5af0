"""Inbound messages: the room for what tenants' recipients send back (two-way messaging), opened empty.

Its first owner is the two-way messaging issue (41): every reply reaches its tenant once, stored and
delivered to the tenant's webhook, and a reply can act on what was sent (STOP and HELP handling moves
here from ``receipts.api``, which today takes the provider's inbound webhook only for opt-outs). It sits
above receipts in the house: it may use the providers' inbound parsing (``delivery.providers``) and the
tenant-webhook outbox (``receipts.webhooks``); no stage below imports it.
"""
