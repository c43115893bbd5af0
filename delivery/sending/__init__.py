"""The send worker: claiming released messages, submitting them through a provider adapter, recording each
attempt's outcome, and reconciling uncertain submissions."""
