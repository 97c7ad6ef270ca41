"""Hypothesis state machines (one per subsystem) and the pytest modules that run them."""
