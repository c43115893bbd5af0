"""The operator console's scheduling pages (Django admin): bulk actions, campaign pages and filters.
scheduling/admin.py registers them."""
