"""``h5feed bench``: h5feed against the alternatives, on one workload, in one run.

Modules: :mod:`workload` (the data and the per-clip work every contender shares),
:mod:`contender` (the interface and the list of contenders), one module per contender
(:mod:`percore`, :mod:`feed`, :mod:`tf_recipes`, :mod:`tf_decode`, :mod:`keras_pydataset`,
:mod:`torch_loader`, :mod:`grain_loader`), :mod:`ceiling` and :mod:`synthetic_worker` (the
consumer ceiling), :mod:`measure` and :mod:`run_one` (inside each contender's process),
:mod:`runner` (the schedule), :mod:`report` (JSON, markdown, PNG), :mod:`command` (the CLI).
Importing this package imports nothing heavy.
"""
