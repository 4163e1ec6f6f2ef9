"""h5feed's own retries of a streamed file's reads (h5feed/producer/files/read_retries.py):
each ranged GET is retried on its own, its body's length checked, and a read's GETs share
the read's budget; what a retry cannot mend is not retried; each retry is counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from h5feed.common import storage_config
from h5feed.producer.files import read_retries, request_counts

SIZE = 100


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(read_retries, "_BACKOFF_S", 0.001)
    request_counts.take()  # what other tests counted
    yield
    request_counts.take()


def _fetch(answers: list[object]) -> tuple[Callable[[int, int], bytes], list[tuple[int, int]]]:
    """A GET answering each call with the next of ``answers`` (bytes, or an exception to
    raise), and the ranges it was called with."""
    calls: list[tuple[int, int]] = []

    def fetch(start: int, end: int) -> bytes:
        calls.append((start, end))
        answer = answers[len(calls) - 1]
        if isinstance(answer, BaseException):
            raise answer
        assert isinstance(answer, bytes)
        return answer

    return fetch, calls


def test_a_failed_get_is_made_again_for_the_same_range_and_counted() -> None:
    fetch, calls = _fetch([ConnectionResetError("reset"), OSError("503"), b"x" * 10])
    assert read_retries.each_request(fetch, SIZE)(10, 20) == b"x" * 10
    assert calls == [(10, 20)] * 3
    assert request_counts.take().retries == 2


def test_a_body_cut_short_is_retried_and_one_past_the_objects_end_is_not_short() -> None:
    fetch, calls = _fetch([b"x" * 4, b"x" * 10])
    assert read_retries.each_request(fetch, SIZE)(10, 20) == b"x" * 10
    assert len(calls) == 2
    fetch, calls = _fetch([b"x" * 5])
    assert read_retries.each_request(fetch, SIZE)(95, 120) == b"x" * 5  # clamped to the size
    assert len(calls) == 1


def test_a_get_that_keeps_failing_raises_after_read_attempts() -> None:
    attempts = storage_config.READ_ATTEMPTS
    fetch, calls = _fetch([b"short"] * attempts)
    with pytest.raises(read_retries.ShortBody, match="5 of 10 received"):
        read_retries.each_request(fetch, SIZE)(0, 10)
    assert len(calls) == attempts
    assert request_counts.take().retries == attempts - 1


@pytest.mark.parametrize("error", [FileNotFoundError("gone"), PermissionError("denied")])
def test_what_a_retry_cannot_mend_is_not_retried(error: BaseException) -> None:
    fetch, calls = _fetch([error, b"x" * 10])
    with pytest.raises(type(error)):
        read_retries.each_request(fetch, SIZE)(0, 10)
    assert len(calls) == 1


def test_a_replaced_object_is_refused_and_counted_not_retried() -> None:
    class FileExpired(OSError):  # fsspec's name for HTTP 412 on an ETag-pinned read
        pass

    fetch, calls = _fetch([FileExpired("412"), b"x" * 10])
    with pytest.raises(FileExpired):
        read_retries.each_request(fetch, SIZE)(0, 10)
    assert len(calls) == 1
    assert request_counts.take().refused == 1
    fetch, calls = _fetch([FileExpired("412"), b"x" * 10])
    get = read_retries.each_request(fetch, SIZE)
    with pytest.raises(FileExpired):
        read_retries.retried(lambda: get(0, 10), lambda: None)  # a GET made for a read
    assert len(calls) == 1
    assert request_counts.take().refused == 1  # counted by the GET, not again by the read


def test_the_gets_made_for_a_read_share_the_reads_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read whose budget is spent starts no further attempt of its GETs (each GET alone
    would have had a budget of its own, and made every attempt)."""
    fetch, calls = _fetch([ConnectionResetError("reset")] * 8)
    get = read_retries.each_request(fetch, SIZE)
    monkeypatch.setattr(storage_config, "READ_BUDGET_S", 0.0)  # the read's: spent at once

    def read() -> bytes:
        monkeypatch.setattr(storage_config, "READ_BUDGET_S", 60.0)  # a GET's own would last
        return get(0, 10)

    with pytest.raises(ConnectionResetError):
        read_retries.retried(read, lambda: None)
    assert len(calls) == 1  # neither the GET nor the read was tried again
    calls.clear()
    with pytest.raises(ConnectionResetError):
        get(0, 10)  # outside a read: its own budget of 60 s
    assert len(calls) == storage_config.READ_ATTEMPTS


def test_a_reads_pieces_already_fetched_are_kept_when_a_later_get_fails_once() -> None:
    """The failure that sank the issue's fault mix: one read needing several GETs, one of
    which meets a fault; only that GET is made again."""
    answers: list[object] = [b"a" * 10, ConnectionResetError("reset"), b"b" * 10]
    fetch, calls = _fetch(answers)
    get = read_retries.each_request(fetch, SIZE)

    def read() -> bytes:
        return get(0, 10) + get(10, 20)

    assert read_retries.retried(read, lambda: None) == b"a" * 10 + b"b" * 10
    assert calls == [(0, 10), (10, 20), (10, 20)]
