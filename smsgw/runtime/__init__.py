"""The processes and what they run on: the routed queues, each process role's checks, the broker transports
and what the broker holds, the worker's consumer, beat's stop, log hygiene and JSON logs, batched SQL
helpers."""
