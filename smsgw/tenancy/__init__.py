"""Tenants' API keys and the API's authentication (the Tenant and ApiKey models are in smsgw.models)."""
