"""What the scenarios (and the integration tests) stand on: the gateway's processes, the bench tenant and
its messages, and what a run measures. Imports no scenario."""
