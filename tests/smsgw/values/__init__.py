"""Tests of smsgw/values."""
