"""The user's own Python code in a worker: a source named by an import path.

A source job names ``"package.module:factory"`` and msgpack-able ``args``; the worker imports
the module (never unpickles anything) and calls ``factory(**args)``, adding the keyword
arguments ``shard_index`` (this worker's position among the job's workers, within the
trainer's shard: ``i * W + w`` with ``shard=(i, n)`` and W workers), ``shard_count``
(``n * W``), ``seed`` (the dataset's, the same in every worker) and ``epoch`` (the
iteration's first epoch; a later pass of a generator function gets the epoch it starts in)
for each that the factory's signature names explicitly (:mod:`.user_code`).

The kind of source is detected from the object the factory returns (:mod:`.detect`), each
kind's class asked in this order:

1. **keras** (:mod:`.keras_kind`): ``__len__`` and ``__getitem__``, and a class in its MRO
   named ``PyDataset`` or ``Sequence`` from a ``keras``/``tensorflow`` module; item ``i`` is
   a whole batch (checked by name, so the worker never imports TensorFlow itself);
2. **map** (:mod:`.map_kind`): ``__len__`` and ``__getitem__`` (not a dict): item ``i`` is
   one element;
3. **generator** (:mod:`.generator_kind`): an iterator, an object with ``generate_data()`` or
   ``__iter__``, or a callable.

Anything else raises :class:`SourceError`. Each kind is a class following
:class:`.kind.KindClass` (detect, load) whose objects tell the SOURCE_INFO's parts and yield
each unit's elements (:class:`.kind.KindSource`); :class:`.job.SourceJob` turns them into
messages. A worker whose user code imported torch runs ``torch.set_num_threads(1)`` once the
factory returned, as PyTorch's DataLoader workers do; tensor fields are taken as
:mod:`h5feed.common.elements.values` says (by class, never importing torch).

Errors of the user's code (import, factory, item, generator) are raised as SourceError naming
the source and the index or element, chained to the original exception, so the worker's
traceback (sent to the trainer) shows the user's frames.
"""

from h5feed.producer.sources.detect import KINDS, detect_kind
from h5feed.producer.sources.job import SourceJob

__all__ = ["KINDS", "SourceJob", "detect_kind"]
