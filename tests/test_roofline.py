"""The read roofline: its multi-stream sum against the plain one, and how the fastest way is chosen.

Values, never speed: the clock is faked wherever a choice depends on time.
"""

from __future__ import annotations

import numpy as np
import pytest

from gemvbw import roofline
from gemvbw.roofline import Bandwidth, _parallel_sum, _parallel_sum_streams, pick_fastest_read, read_ways


@pytest.mark.parametrize("n", [0, 1, 63, 64, 255, 256 * 8 - 1, 256 * 8, 256 * 8 + 1, 10_007, 65_536 + 300])
@pytest.mark.parametrize("nchunks", [1, 2, 3])
@pytest.mark.parametrize("streams", [1, 2, 3, 4, 8])
def test_multi_stream_sum_reads_every_element_once(n, nchunks, streams):
    # small integers, so every partial sum is exact in float32 and any element read twice or skipped
    # (a stream's span, the tail after the last whole turn, a chunk's edge) changes the total
    a = (np.arange(n) % 7 + 1).astype(np.float32)
    want = float(np.sum(a.astype(np.int64)))
    assert float(_parallel_sum_streams(a, nchunks, streams)) == want
    assert float(_parallel_sum(a, nchunks)) == want


def test_multi_stream_sum_sees_each_position():
    # a single 1 anywhere is found, whichever stream, turn or tail it falls in
    n = 3 * 8 * 64 + 37
    for pos in (0, 63, 64, 8 * 64 - 1, 8 * 64, n // 2, n - 37, n - 1):
        a = np.zeros(n, np.float32)
        a[pos] = 1.0
        assert float(_parallel_sum_streams(a, 2, 8)) == 1.0, pos


def test_fastest_way_is_the_roofline_with_every_way_kept():
    nbytes = 1_000_000_000
    times = {1: [0.10, 0.11, 0.09], 4: [0.08, 0.085, 0.09], 8: [0.082, 0.081, 0.09]}
    bw = pick_fastest_read(2, nbytes, times)
    assert (bw.kind, bw.threads, bw.buffer_bytes, bw.streams) == ("read", 2, nbytes, 4)
    assert bw.best_s == 0.08 and bw.trials_s == (0.08, 0.085, 0.09)
    assert bw.gbps == pytest.approx(12.5)
    assert bw.gbps_by_streams == ((1, pytest.approx(1 / 0.09)), (4, pytest.approx(12.5)), (8, pytest.approx(1 / 0.081)))


def test_a_tie_goes_to_the_fewest_streams():
    bw = pick_fastest_read(1, 10**9, {8: [0.1], 1: [0.1, 0.2], 4: [0.1]})
    assert bw.streams == 1 and bw.trials_s == (0.1, 0.2)


def test_ways_take_turns_and_the_fastest_wins(monkeypatch):
    # a fake clock: reading with s streams takes 1/s of a second, except that one stream is fastest
    # in the second trial only; the rotation and the best-of-trials choice are checked
    clock = [0.0]
    calls: list[int] = []

    def reader(a, threads, s):
        def read():
            calls.append(s)
            clock[0] += 0.01 if (s == 1 and len(calls) > 3 and (len(calls) - 4) // 3 == 1) else 1.0 / s
        return read

    monkeypatch.setattr(roofline, "_stream_reader", reader)
    bw = roofline.read_bandwidth(2, 4096, trials=3, streams=(1, 4, 8), clock=lambda: clock[0])
    assert calls[:3] == [1, 4, 8]  # the warm-up, in order
    assert calls[3:] == [1, 4, 8, 4, 8, 1, 8, 1, 4]  # each trial starts one way later
    assert bw.streams == 1 and bw.best_s == pytest.approx(0.01)
    assert dict(bw.gbps_by_streams)[8] == pytest.approx(4096 * 8 / 1e9)


def test_how_the_read_was_taken_is_said():
    bw = Bandwidth("read", 2, 1, 1.0, (1.0,), 40.0, 8, ((1, 33.5), (4, 38.2), (8, 40.0)))
    assert read_ways(bw) == "fastest of 1/4/8 streams per thread: 33.5/38.2/40.0 GB/s"
    one = Bandwidth("read", 1, 1, 1.0, (1.0,), 9.8, 1, ((1, 9.8), (4, 9.1)))
    assert read_ways(one) == "fastest of 1/4 streams per thread: 9.8/9.1 GB/s"
    assert read_ways(Bandwidth("read", 1, 1, 1.0, (1.0,), 9.8)) == ""


@pytest.mark.parametrize("nbytes", [4096, 10_000_000])  # 10 MB: numpy alone would start it 16 bytes into a page
def test_the_read_buffer_starts_on_a_cache_line_and_sums_to_its_length(nbytes):
    a = roofline.read_buffer(nbytes)
    assert a.ctypes.data % 64 == 0 and a.dtype == np.float32 and a.size == nbytes // 4
    assert _parallel_sum(a, 2) == a.size  # every float is 1


def _read(gbps: float) -> roofline.Bandwidth:
    return roofline.Bandwidth("read", 2, 256 << 20, (256 << 20) / gbps / 1e9, (1.0,), gbps, 8, ((8, gbps),))


@pytest.mark.parametrize("after,moved", [(44.4, True), (35.6, True), (43.6, False), (36.4, False), (40.0, False)])
def test_a_read_roofline_that_moved_more_than_a_tenth_during_the_rows_is_said(after, moved):
    from gemvbw.results import ROOFLINE_MOVED, roofline_moved_notes

    assert ROOFLINE_MOVED == 0.10
    notes = roofline_moved_notes(_read(40.0), _read(after))
    assert [n.code for n in notes] == (["read-roofline-moved"] if moved else [])
    if moved:
        change = f"{after / 40.0 - 1:+.0%}"
        assert f"was 40.0 GB/s before the rows and {after:.1f} GB/s after them ({change}; threshold 10%)" \
            in notes[0].message
        assert "ratios taken in one run" in notes[0].advice


@pytest.mark.parametrize("after", [None, 39.2, 50.0])
def test_the_notes_say_how_the_read_roofline_held(after):
    # steady: one line with both figures; moved: the warning (from the runner's notes) and not that line; not
    # measured again (an interrupted run): neither
    from gemvbw.report.text import note_lines
    from gemvbw.results import SweepRecord, roofline_moved_notes

    first = roofline.Roofline(roofline.Bandwidth("memcpy", 2, 512 << 20, 0.04, (0.04,), 27.0), _read(40.0))
    rec = SweepRecord({}, {}, roofline=first, read_after=None if after is None else _read(after))
    if after is not None:
        rec.notes = roofline_moved_notes(first.read, rec.read_after)
    text = "\n".join(note_lines(rec))
    held = "the read roofline measured again after the rows: 39.2 GB/s, -2% from the 40.0 GB/s before them " \
           "(within 10%): the bandwidth held"
    assert (held in text) == (after == 39.2)
    assert ("read-roofline" in "".join(n.code for n in rec.notes)) == (after == 50.0)
    assert ("40.0 GB/s before the rows and 50.0 GB/s after them (+25%" in text) == (after == 50.0)
    doc = rec.to_dict()["roofline"]
    assert doc["read_after_gbps"] == after and doc["read_after_streams"] == (None if after is None else 8)


@pytest.mark.parametrize("after", [60.0, 30.0])
def test_rows_above_the_first_reading_but_not_the_second_are_named(after):
    # the above-read-roofline note of such a row blamed a cache; once the bandwidth is known to have risen,
    # the warning names them (a row above both readings, or below the first, is not); a fall explains none
    from types import SimpleNamespace

    from gemvbw.results import roofline_moved_notes

    rows = [SimpleNamespace(bits=b, M=4096, K=14336, eff_gbps=g) for b, g in ((8, 30.0), (4, 50.0), (2, 70.0))]
    message = roofline_moved_notes(_read(40.0), _read(after), rows)[0].message
    named = "; the rows above the first reading but not above the second (w4 4096x14336 50.0 GB/s) may have met " \
            "the faster bandwidth rather than a cache"
    assert message.endswith(named) == (after == 60.0)
    assert "30.0 GB/s)" not in message and "70.0" not in message
