"""The control record: what happened to each plan, kept in the warehouse beside the data."""
