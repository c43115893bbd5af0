"""Tests of scheduling/schedules."""
