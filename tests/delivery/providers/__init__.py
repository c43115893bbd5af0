"""Tests of delivery/providers."""
