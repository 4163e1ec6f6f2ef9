"""Worker processes on the trainer's host: started from one spawner thread, kept in a pool across
iterations, or started for one iteration only."""
