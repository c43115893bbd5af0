"""Tests of delivery/guards."""
