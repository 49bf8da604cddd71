"""The demo pipeline: orders -> daily_revenue -> published_revenue. One user of the library."""
