"""The demo pipeline: order events -> daily revenue -> published revenue, and its story."""
