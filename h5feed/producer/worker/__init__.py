"""A worker process: its event loop, its jobs, and decoding clips."""
