"""Users' code where users keep it: a factory in the training script (``"__main__:factory"``),
modules found where the trainer finds them (``source=`` and ``transform=`` alike), workers that
never start workers, ``ragged=`` on any one dimension, and the length of map/keras sources
known to tf.data."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from conftest import one_file_of_tiny_videos
from paths import REPO

import h5feed
from h5feed.common.elements.values import RaggedArray
from h5feed.common.user_code.trainer_main import has_main_guard

ROOT = REPO
FAST = {"start_timeout_s": 60.0, "unit_timeout_s": 60.0}
_SCRIPT_TIMEOUT_S = 100

TRAINER = """
import json
import sys

import numpy as np

import h5feed


class Items:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.int64(i), __name__  # where the class was defined, as the worker ran it


def factory(n):
    return Items(n)


GUARD
    rows, names = [], set()
    feed = h5feed.batches(
        source="__main__:factory", source_args={"n": 10}, batch_size=4, workers=2,
        shuffle=False, start_timeout_s=60, unit_timeout_s=60,
    )
    for ids, where in feed:
        rows += ids.tolist()
        names |= {n.decode() for n in where}
    print(json.dumps({"rows": rows, "names": sorted(names)}))
"""


def run_script(args: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=_SCRIPT_TIMEOUT_S,
    )


def trainer(guarded: bool) -> str:
    guard = 'if __name__ == "__main__":' if guarded else "if True:"
    return TRAINER.replace("GUARD", guard)


def test_a_factory_in_a_guarded_training_script(tmp_path: pathlib.Path) -> None:
    (tmp_path / "train.py").write_text(trainer(guarded=True))
    proc = run_script(["train.py"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result == {"rows": list(range(10)), "names": ["__mp_main__"]}  # not "__main__"


def test_a_factory_in_a_training_module_run_with_python_m(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(trainer(guarded=True))
    proc = run_script(["-m", "mypkg.train"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result == {"rows": list(range(10)), "names": ["__mp_main__"]}


def test_a_script_without_the_guard_is_refused_before_any_worker(tmp_path: pathlib.Path) -> None:
    (tmp_path / "train.py").write_text(trainer(guarded=False))
    proc = run_script(["train.py"], tmp_path)
    assert proc.returncode != 0
    assert "ValueError: h5feed: source '__main__:factory' is defined in" in proc.stderr
    assert 'no top-level `if __name__ == "__main__":` guard' in proc.stderr
    assert "'mydata:name'" in proc.stderr  # the way out, named


def test_python_c_is_refused_naming_the_fix(tmp_path: pathlib.Path) -> None:
    code = "import h5feed; h5feed.batches(source='__main__:factory')"
    proc = run_script(["-c", code], tmp_path)
    assert proc.returncode != 0
    assert "is defined in a notebook, `python -c` or an interactive session" in proc.stderr
    assert "move it into a module file" in proc.stderr


def test_remote_producers_cannot_load_the_training_script() -> None:
    with pytest.raises(ValueError, match=r"remote producers \(listen=\) do not have"):
        h5feed.batches(source="__main__:factory", listen="tcp://127.0.0.1:0", workers=0)
    with pytest.raises(ValueError, match="transform '__main__:fn' is defined in your training"):
        h5feed.batches("x.h5", transform="__main__:fn", listen="tcp://127.0.0.1:0")


@pytest.mark.parametrize(
    ("text", "guarded"),
    [
        ('if __name__ == "__main__":\n    main()\n', True),
        ("if '__main__' == __name__:\n    main()\n", True),
        ('def f():\n    if __name__ == "__main__":\n        main()\n', False),  # not top-level
        ('if __name__ != "__main__":\n    pass\n', False),
        ("main()\n", False),
        ("def broken(:\n", False),
    ],
)
def test_the_guard_is_read_from_the_syntax_tree(text: str, guarded: bool) -> None:
    assert has_main_guard(text) is guarded


def test_a_module_that_builds_a_dataset_at_import_raises_in_the_worker(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "careless.py").write_text(
        textwrap.dedent(
            """
            import h5feed

            def items():
                return list(range(4))

            feed = h5feed.batches(source="careless:items", workers=1)  # no guard
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # found by the workers as by the trainer
    with pytest.raises(h5feed.H5FeedError, match="created inside an h5feed worker process"):
        list(h5feed.batches(source="careless:items", workers=1, **FAST))


def test_transform_modules_are_found_where_source_modules_are(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = one_file_of_tiny_videos(tmp_path / "data", 3)
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_transforms.py").write_text(
        "import numpy as np\n\n"
        "def frame_count(clip, rng):\n"
        "    return np.asarray([len(clip)], np.int64)\n"
    )
    monkeypatch.syspath_prepend(str(code))  # on the trainer's sys.path only, not PYTHONPATH
    feed = h5feed.batches(
        data, transform="my_transforms:frame_count", clip_len=2, batch_size=3, workers=1, **FAST
    )
    (batch,) = list(feed)
    assert batch["frames"].tolist() == [[2], [2], [2]]


def test_ragged_on_the_second_dimension_as_numpy_and_tf_data() -> None:
    tf = pytest.importorskip("tensorflow")
    common: dict[str, Any] = {
        "source": "user_loaders:ChannelsFirst", "source_args": {"n": 6}, "batch_size": 6,
        "shuffle": False, "workers": 2, **FAST,
    }  # fmt: skip
    (batch,) = list(h5feed.batches(**common, ragged=["clip"]))
    clips = batch["clip"]
    assert isinstance(clips, RaggedArray) and clips.axis == 1
    assert [row.shape for row in clips.rows()] == [(2, 1 + i % 3, 3) for i in range(6)]
    ds = h5feed.dataset(**common, ragged=True)
    spec = ds.element_spec["clip"]
    assert isinstance(spec, tf.RaggedTensorSpec) and spec.ragged_rank == 2
    assert spec.shape.as_list() == [None, 2, None, 3]
    (element,) = list(ds)
    for i in range(6):
        row = element["clip"][i].to_tensor().numpy()
        assert row.shape == (2, 1 + i % 3, 3)
        assert np.all(row == i)


def test_ragged_on_two_varying_dimensions_is_refused_before_any_worker() -> None:
    tf = pytest.importorskip("tensorflow")
    signature = tf.TensorSpec((None, None), tf.float32)
    with pytest.raises(h5feed.SourceError, match="varies in dimensions \\[0, 1\\]"):
        h5feed.batches(source="user_loaders:TwoVarying", output_signature=signature, ragged=True)


def test_map_and_keras_sources_tell_tf_data_their_length() -> None:
    tf = pytest.importorskip("tensorflow")
    pytest.importorskip("keras")
    items = h5feed.dataset(
        source="user_loaders:ChannelsFirst", source_args={"n": 10}, batch_size=4, epochs=2,
        workers=1, **FAST,
    )  # fmt: skip
    assert int(items.cardinality()) == 6  # ceil(10 / 4) x 2 epochs
    assert len(list(items)) == 6
    batches = h5feed.dataset(
        source="user_keras:Batches", source_args={"n_batches": 5, "batch": 4, "rows": 18},
        epochs=2, workers=1, **FAST,
    )  # fmt: skip
    assert int(batches.cardinality()) == 10
    assert int(tf.data.experimental.cardinality(batches.map(lambda *b: b))) == 10
