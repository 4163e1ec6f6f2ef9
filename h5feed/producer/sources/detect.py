"""Which kind of source an object is: each kind's class asked in turn, first yes wins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from h5feed.common.errors import SourceError
from h5feed.producer.sources.generator_kind import GeneratorSource
from h5feed.producer.sources.items import is_dataset
from h5feed.producer.sources.keras_kind import KerasSource
from h5feed.producer.sources.kind import KindClass
from h5feed.producer.sources.map_kind import MapSource

#: Every kind's class, in the order they are asked: keras before map (a keras dataset is
#: a dataset too), the datasets before the generators (a list is iterable too).
KINDS: Final[tuple[KindClass, ...]] = (KerasSource, MapSource, GeneratorSource)


def detect_kind(obj: Any) -> KindClass:
    """The class of the kind ``obj`` is; SourceError for a dict, str or bytes (a dataset by
    its methods, surely a mistake) and for an object no kind takes."""
    if is_dataset(obj) and isinstance(obj, (Mapping, str, bytes)):
        raise SourceError(f"a {type(obj).__name__} is not a source (a list or dataset is)")
    for kind in KINDS:
        if kind.detects(obj):
            return kind
    raise SourceError(
        f"the factory returned a {type(obj).__name__}, which is none of: a dataset "
        "(__len__ + __getitem__), a keras PyDataset, an iterator or generator, an object with "
        "generate_data() or __iter__, or a callable returning an iterable"
    )
