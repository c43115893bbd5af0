"""A message's life as a state machine: the compare-and-set transitions every status change goes through,
with the stamps and timeline event each edge writes."""
