"""``python -m h5feed.producer.worker``: one worker process (:mod:`h5feed.producer.worker.process`).

The command line the trainer and ``h5feed produce`` start, kept as it was before the worker's
modules became a package (process listings and operators' scripts look for it)."""

import sys

from h5feed.producer.worker.process import main

if __name__ == "__main__":
    sys.exit(main())
