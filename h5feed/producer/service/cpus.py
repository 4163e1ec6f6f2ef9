"""The producer's view of :mod:`h5feed.common.system.cpus` (the consumer sizes ``workers="auto"`` by
it too, and the consumer never imports the producer)."""

from h5feed.common.system.cpus import available_cpus, cgroup_cpu_quota

__all__ = ["available_cpus", "cgroup_cpu_quota"]
