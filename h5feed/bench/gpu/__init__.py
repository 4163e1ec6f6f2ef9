"""``h5feed bench gpu-train``: does h5feed keep a real model on a real GPU busy?

Modules: :mod:`feeders` (what feeds the loop: h5feed, PyTorch's DataLoader, one cached batch),
:mod:`models` (the fixed 3D CNN, in torch and in Keras 3), :mod:`loops` (the timed training
loops and what they measure), :mod:`train` (the subcommand: calibration, one fresh process per
feeder, the report). ``run.sh`` is the GPU machine's whole run (wheels, the scaling curve,
then this); it runs from a checkout and is not part of the wheel. Importing this package
imports nothing heavy.
"""
