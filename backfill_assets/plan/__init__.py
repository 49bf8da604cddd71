"""Replay plans: the model, strict loading, identity, signed approvals, fit to a table, phases."""
