"""Every kind of user source the trainer runs, by its wire name: :data:`SCHEDULERS`.

* **map** (:mod:`.map_kind`) and **keras** (:mod:`.keras_kind`): datasets indexed the same in
  every worker, planned by :mod:`.item_scheduler`;
* **generator** (:mod:`.generator_kind`): each worker iterates its own shard.

Each is a class following :class:`~.kind.KindClass` (its facts, and ``make``, its scheduler
following :class:`~.kind.KindScheduler`); nothing compares kind names.
"""

from __future__ import annotations

from typing import Final

from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.sources.generator_kind import GeneratorKind
from h5feed.consumer.sources.keras_kind import KerasKind
from h5feed.consumer.sources.kind import KindClass
from h5feed.consumer.sources.map_kind import MapKind

#: Each kind's class, by its name.
SCHEDULERS: Final[dict[SourceKind, KindClass]] = {
    cls.kind: cls for cls in (MapKind, KerasKind, GeneratorKind)
}


def kind_class(kind: SourceKind) -> KindClass:
    """The class of ``kind`` (every member has one: ``tests/unit/common/test_source_kinds.py``)."""
    return SCHEDULERS[kind]
