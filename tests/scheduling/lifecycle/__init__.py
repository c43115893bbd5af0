"""Tests of scheduling/lifecycle."""
