"""Executing a permitted run: writes, fingerprints, gates; and the CLI's staged backfill run."""
