"""The epoch plan: which samples, in which batches, and the rest of an epoch after a change
of topology."""
