"""A worker's numeric libraries, one thread each (h5feed/producer/worker/threads.py); end to end
through a worker's transform: tests/unit/producer/test_transform.py."""

from __future__ import annotations

from h5feed.producer.worker.threads import THREAD_VARIABLES, one_thread_each


def test_each_unset_thread_count_becomes_one_and_a_set_one_is_kept() -> None:
    environ = {"OMP_NUM_THREADS": "4", "PATH": "/bin"}
    one_thread_each(environ)
    assert environ == {**dict.fromkeys(THREAD_VARIABLES, "1"), "OMP_NUM_THREADS": "4",
                       "PATH": "/bin"}  # fmt: skip
