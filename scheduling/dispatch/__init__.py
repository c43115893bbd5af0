"""Releasing due messages: the sweep, the ordered release gates, quiet hours, and the recovery of tasks a
broker lost."""
