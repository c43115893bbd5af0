"""Tests of scheduling/campaigns."""
