"""Dagster definitions: resources, the replayable-table factory, publish, sensor, coordinator."""

import warnings

# Partitioned asset checks and backfill policies are preview/beta in Dagster 1.13; we depend on
# them knowingly (pinned range, see pyproject.toml), so their warnings are noise to our users.
warnings.filterwarnings("ignore", message=r".*(is currently in preview|is currently in beta).*")
