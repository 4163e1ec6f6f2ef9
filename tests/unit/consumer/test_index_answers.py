"""IndexAnswers on its own: the HDF5 handshake's INDEXes decoded, the first of each file
kept, the index built in file order; no sockets or scheduler."""

from __future__ import annotations

import numpy as np
import pytest

from h5feed.common.protocol import messages
from h5feed.consumer.hdf5.index_answers import IndexAnswers, indexed_files
from h5feed.consumer.plan.epoch_plan import FileColumns, Index

FILES = ("a.h5", "b.h5")


def columns(names: list[str], frames: list[int], labels: list[int]) -> FileColumns:
    return FileColumns(
        tuple(n.encode() for n in names), np.array(frames, np.int64), np.array(labels, np.int64)
    )


def same(x: FileColumns, y: FileColumns) -> bool:
    return (
        tuple(x.names) == tuple(y.names)
        and np.array_equal(x.frames, y.frames)
        and np.array_equal(x.labels, y.labels)
    )


def test_an_index_and_an_index_batch_decode_to_the_same_videos() -> None:
    one = messages.Index("j", 1, (messages.VideoEntry("v0", 5, 2), messages.VideoEntry("v1", 7, 3)))
    batch = messages.IndexBatch(
        "j", (0, 1), (1, 2), (b"w", b"v0", b"v1"),
        np.array([4, 5, 7], np.int64), np.array([0, 2, 3], np.int64),
    )  # fmt: skip
    decoded_one, decoded_batch = indexed_files(one), indexed_files(batch)
    assert decoded_one is not None and decoded_batch is not None
    assert [f for f, _c in decoded_batch] == [0, 1]
    assert decoded_one[0][0] == 1 and same(decoded_one[0][1], decoded_batch[1][1])
    assert same(decoded_batch[0][1], columns(["w"], [4], [0]))


def test_another_message_is_no_index() -> None:
    assert indexed_files(messages.Bye("done")) is None


def test_the_first_videos_of_a_file_are_kept() -> None:
    answers = IndexAnswers(FILES, None)
    first, second = columns(["v"], [5], [0]), columns(["v"], [6], [0])
    answers.add(0, first)
    answers.add(0, second)  # a taker's INDEX is compared with the first, never kept over it
    assert len(answers) == 1 and 0 in answers and 1 not in answers
    assert same(answers.planned(0, None), first)


def test_the_index_is_built_in_file_order_whoever_answered_first() -> None:
    answers = IndexAnswers(FILES, None)
    answers.add(1, columns(["b0", "b1"], [3, 4], [1, 1]))
    waiting = answers.waiting()
    assert not answers.complete and "'a.h5'" in waiting and "1 files left" in waiting
    with pytest.raises(KeyError):
        answers.index()
    answers.add(0, columns(["a0"], [2], [0]))
    assert answers.complete
    index = answers.index()
    assert index.files == FILES and index.names.tolist() == [b"a0", b"b0", b"b1"]
    assert index.file_of_video.tolist() == [0, 1, 1]


def test_labels_decided_from_the_file_list_replace_the_workers() -> None:
    answers = IndexAnswers(FILES, (7, 9))
    labelled = answers.labelled([(1, columns(["v0", "v1"], [3, 4], [0, 5]))])
    assert labelled[0][0] == 1 and labelled[0][1].labels.tolist() == [9, 9]
    unlabelled = IndexAnswers(FILES, None)
    files = [(1, columns(["v0"], [3], [5]))]
    assert unlabelled.labelled(files) is files


def test_planned_videos_come_from_a_known_index_when_none_were_sent() -> None:
    b = columns(["b0", "b1"], [3, 4], [1, 2])
    known = Index.from_columns(FILES, [columns(["a0"], [2], [0]), b])
    answers = IndexAnswers(FILES, None)
    planned = answers.planned(1, known)
    assert same(planned, b)
    assert 1 in answers  # recorded from now: a second check reads it back


def test_planned_videos_of_a_file_never_indexed_and_no_index_raise() -> None:
    with pytest.raises(RuntimeError, match="file 0"):
        IndexAnswers(FILES, None).planned(0, None)
