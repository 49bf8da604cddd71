"""All SQL the product runs: partition writes, snapshots, fingerprints and gate queries."""
