"""Twilio: the adapter over the official SDK, its HTTP client, its error table and its status callbacks."""
