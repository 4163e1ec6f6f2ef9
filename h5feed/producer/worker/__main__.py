"""``python -m h5feed.producer.worker``: one worker process (:mod:`h5feed.producer.worker.process`).

The command line the trainer and ``h5feed produce`` start, kept as it was before the worker's
modules became a package (process listings and operators' scripts look for it). Numeric
libraries get one thread each before anything imports NumPy
(:mod:`h5feed.producer.worker.threads`), and glibc's allocator keeps freed memory for the next
frame (:mod:`h5feed.common.system.allocator`)."""

import os
import sys

from h5feed.common.system.allocator import keep_freed_memory
from h5feed.producer.worker.threads import one_thread_each

one_thread_each(os.environ)
keep_freed_memory(os.environ)

from h5feed.producer.worker.process import main  # noqa: E402  (after the environment is set)

if __name__ == "__main__":
    sys.exit(main())
