"""Campaigns: one request to many recipients, made into messages by a background job, paused, resumed and
cancelled as a whole, with progress counters."""
