"""The operator console's project-wide parts (Django admin): operator roles as groups, the guard on the
built-in periodic tasks, the login lockout's client address. config/admin.py registers the tenant pages."""
