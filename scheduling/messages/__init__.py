"""One message from the API's point of view: accepting it (validation, birth, idempotency), reading it back,
cancelling and editing it."""
