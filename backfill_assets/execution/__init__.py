"""Executing a cleared slice: writes, fingerprints, gates; and the CLI's staged backfill run."""
