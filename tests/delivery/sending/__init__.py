"""Tests of delivery/sending."""
