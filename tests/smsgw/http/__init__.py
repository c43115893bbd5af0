"""Tests of smsgw/http."""
