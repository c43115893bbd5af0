"""Tests of scheduling/messages."""
