"""What a feed tells about itself: its statistics, its Prometheus metrics, and the sizing gauge."""
