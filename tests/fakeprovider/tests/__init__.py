"""The fake provider's own tests, inside its package like a real provider's."""
