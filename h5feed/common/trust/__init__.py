"""What guards a trust boundary: CURVE keys, which addresses stay on a host, bounded reads of
small files, and rate-limited refusal lines."""
