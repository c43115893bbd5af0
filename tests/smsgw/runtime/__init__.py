"""Tests of smsgw/runtime."""
