"""Tests of the scheduling admin pages (scheduling/admin.py, scheduling/console)."""
