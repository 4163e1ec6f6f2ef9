"""What a process asks of its host: CPUs, open-file limits, /proc accounting, atomic writes,
and log lines with ids."""
