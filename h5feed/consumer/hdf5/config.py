"""An HDF5 feed's configuration from ``dataset()``'s arguments (:func:`hdf_config`): the
files resolved (:mod:`h5feed.consumer.hdf5.files`) and every group validated before any
process starts. A source feed's is :func:`h5feed.consumer.sources.api.make_source_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from h5feed.common.config import ClipSpec
from h5feed.common.file_labels import directory_labels
from h5feed.common.system.cache_dir import default_cache_dir
from h5feed.consumer.config.groups import FeedOptions, check_main_path, field_names, taken
from h5feed.consumer.hdf5.files import resolve_files
from h5feed.consumer.options import DataOptions, HdfConfig, LayoutArgs


def hdf_config(files: Any, kwargs: Mapping[str, Any]) -> HdfConfig:
    """The configuration of an HDF5 feed from ``dataset()``'s arguments, validated (TypeError
    for an unknown argument, ValueError for a bad value, FileNotFoundError for files that match
    nothing) before any process starts."""
    if files is None:
        raise TypeError("h5feed: give the HDF5 files, or source= (your own code)")
    known = {*field_names(ClipSpec), *field_names(LayoutArgs), *FeedOptions.names()}
    unknown = set(kwargs) - known - set(field_names(DataOptions))
    if unknown:
        raise TypeError(f"h5feed: unknown arguments {sorted(unknown)}")
    clip = ClipSpec.of(**taken(ClipSpec, kwargs))
    layout = LayoutArgs(**taken(LayoutArgs, kwargs)).resolve()
    options = FeedOptions.of(kwargs)
    data_args = taken(DataOptions, kwargs)
    data_args["index_cache"] = index_cache_dir(data_args.pop("index_cache", True))
    data = DataOptions(**data_args)
    check_main_path("transform", clip.transform, options)
    paths = resolve_files(files, data.data_root, data.storage_options)
    if data.storage_options is not None:
        from h5feed.consumer.hdf5 import urls  # imports fsspec only when URLs are listed

        urls.warn_if_workers_differ(paths, data.storage_options, options.processes.workers != 0)
    layout, labels = directory_labels(layout, paths)
    return HdfConfig(tuple(paths), clip, layout, options, data, labels)


def index_cache_dir(index_cache: bool | str | None) -> str | None:
    """``index_cache=`` as :class:`DataOptions` holds it: True is :func:`default_cache_dir`,
    a path itself, False/None no cache."""
    if index_cache is True:
        return default_cache_dir()
    return str(index_cache) if index_cache else None
