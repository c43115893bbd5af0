"""Tests of scheduling/dispatch."""
