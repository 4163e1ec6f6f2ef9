"""Progress bars: rich on a terminal, the plain fallback or nothing elsewhere, off on request."""

from __future__ import annotations

import io
import pathlib

from terminal import h5feed_on_a_terminal

from h5feed.demo import Progress
from h5feed.progress import RichBar, SilentBar, progress_bar

TINY_DEMO = [
    "--files", "2", "--videos-per-file", "4", "--min-frames", "16", "--max-frames", "24",
    "--steps", "8", "--warmup", "3", "--batch-size", "4",
]  # fmt: skip
_DEMO_TIMEOUT_S = 180


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_rich_bar() -> None:
    stream = _Terminal()
    bar = progress_bar("train", 3, stream, plain=Progress)
    assert isinstance(bar, RichBar)
    for done in range(1, 4):
        bar.update(done, f"loss {done}")
    bar.close("done")
    bar.close()
    text = stream.getvalue()
    assert "train" in text and "3/3" in text and "done" in text and "━" in text


def test_a_pipe_gets_the_plain_fallback_or_nothing() -> None:
    stream = io.StringIO()
    bar = progress_bar("train", 2, stream, plain=Progress)
    bar.update(2, "loss 1")
    bar.close()
    assert stream.getvalue() == "train [####################] 2/2  loss 1\n"
    assert isinstance(progress_bar("train", 2, io.StringIO()), SilentBar)


def test_no_progress_shows_nothing_even_on_a_terminal() -> None:
    stream = _Terminal()
    bar = progress_bar("train", 2, stream, enabled=False, plain=Progress)
    bar.update(2, "loss 1")
    bar.close()
    assert stream.getvalue() == ""


def _demo_stderr_on_a_terminal(tmp_path: pathlib.Path, *extra: str) -> str:
    """Run a tiny demo with stderr on a pseudo-terminal; return what it wrote there."""
    status, out, err = h5feed_on_a_terminal(
        "demo", "--data", str(tmp_path / "d"), *TINY_DEMO, *extra,
        timeout_s=_DEMO_TIMEOUT_S, columns=160, cwd=tmp_path,
        env={"H5FEED_CACHE_DIR": str(tmp_path / "cache")},
    )  # fmt: skip
    assert status == 0, err
    assert "throughput:" in out
    return err


def test_the_demo_draws_a_rich_bar_on_a_terminal(tmp_path: pathlib.Path) -> None:
    err = _demo_stderr_on_a_terminal(tmp_path)
    assert "train" in err and "8/8" in err and "━" in err, err


def test_the_demo_draws_no_bar_with_no_progress(tmp_path: pathlib.Path) -> None:
    err = _demo_stderr_on_a_terminal(tmp_path, "--no-progress")
    assert "━" not in err and "8/8" not in err and "train [" not in err, err
