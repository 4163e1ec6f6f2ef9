"""One rule for import paths: every option that takes one accepts and refuses the same
strings (``transform=``, ``source=``, what a worker loads, a producer's code policy)."""

from __future__ import annotations

import pytest

from h5feed.common.config import ClipSpec
from h5feed.common.user_code.import_paths import ImportPath, ImportPathError
from h5feed.consumer.config.groups import FeedOptions
from h5feed.consumer.sources.options import SourceConfig
from h5feed.producer.worker import import_path
from h5feed.producer.worker.code_policy import TRUSTED, CodePolicy, CodeRefused

ACCEPTED = [
    "h5feed_no_such_pkg:f",
    "h5feed_no_such_pkg.mod:Class.method",
    "h5feed_no_such_pkg.sub_1.mod2:factory_3",
    "__main__:factory",
]
REFUSED = [
    "no_colon",  # the source option's old rule refused it
    "sample_transforms.to_float",  # the transform option's old rule refused it
    "m:",
    ":f",
    "",
    "m:f:g",  # a second colon
    "a b:f",  # a space (the source option's old rule let it through)
    "m..n:f",  # an empty module part
    "m:f.",  # an empty attribute part
    "1m:f",  # not an identifier
    "m:2f",
    "m:f\n",  # a trailing newline ('$' let the transform option's old regex take it)
    "m-n:f",
]


@pytest.mark.parametrize("path", ACCEPTED)
def test_every_option_accepts_an_import_path(path: str) -> None:
    parsed = ImportPath.parse(path)
    assert f"{parsed.module}:{parsed.attribute}" == path
    assert ClipSpec(transform=path).transform == path
    assert SourceConfig(source=path, options=FeedOptions()).source == path
    # the worker gets past the form: the import itself is what fails here (or, for the
    # trainer's script, that this process is no local worker or its script has no factory)
    with pytest.raises(ImportPathError, match=r"cannot import module|trainer.s script|no attr"):
        import_path.load_callable(path, TRUSTED)


@pytest.mark.parametrize("path", REFUSED)
def test_every_option_refuses_what_is_not_an_import_path(path: str) -> None:
    with pytest.raises(ImportPathError) as parsed:
        ImportPath.parse(path)
    why = str(parsed.value)
    with pytest.raises(ValueError, match=r"transform must be an import path") as caught:
        ClipSpec(transform=path)
    assert why in str(caught.value)
    with pytest.raises(ValueError, match=r"source must be an import path") as caught:
        SourceConfig(source=path, options=FeedOptions())
    assert why in str(caught.value)
    with pytest.raises(ImportPathError) as loaded:  # nothing imported: the form comes first
        import_path.load_callable(path, TRUSTED)
    assert str(loaded.value) == why
    with pytest.raises(CodeRefused, match="refused by the producer's code policy") as refused:
        CodePolicy(("*",)).check(path)
    assert why in str(refused.value)


def test_what_is_not_a_str_is_refused() -> None:
    for value in (3, None, b"m:f", ["m:f"]):
        with pytest.raises(ImportPathError, match="not a str"):
            ImportPath.parse(value)
    with pytest.raises(ValueError, match="source must be an import path"):
        SourceConfig(source=3, options=FeedOptions())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="transform must be an import path"):
        ClipSpec(transform=b"m:f")  # type: ignore[arg-type]
