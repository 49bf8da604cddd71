"""Peer tools for benchmarks/diff_peers.py: which rows differ between two versions of a table."""
