"""Where h5feed is (h5feed/common/system/package_dir.py): the directory workers import it from,
whichever folder the module asking sits in."""

from __future__ import annotations

import pathlib

from paths import REPO

import h5feed
from h5feed.common.system.package_dir import package_dir, package_parent
from h5feed.consumer.processes import local_workers
from h5feed.producer.service import server


def test_the_package_and_its_parent_are_those_of_the_imported_h5feed() -> None:
    assert package_dir() == pathlib.Path(h5feed.__file__).parent
    assert pathlib.Path(package_parent(), "h5feed", "__init__.py").is_file()


def test_workers_get_the_directory_h5feed_is_imported_from() -> None:
    """Both places that start workers put the package's parent on their PYTHONPATH (a module
    two folders deep once put the package itself there)."""
    assert local_workers._PACKAGE_PARENT == server._PACKAGE_PARENT == package_parent()
    assert pathlib.Path(package_parent()).resolve() == REPO.resolve()  # tests run from a clone
