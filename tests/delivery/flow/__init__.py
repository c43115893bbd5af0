"""Tests of delivery/flow."""
