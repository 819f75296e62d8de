"""staticgrad.distributed.chunks: how a batch is split over workers, and which rows of which chunks make each
step's batch (no cluster needed)."""
import numpy as np
import pytest

from staticgrad.distributed import batch_spans, split_rows


@pytest.mark.parametrize("n, parts", [(10, 2), (7, 3), (1, 2), (4096, 2), (5, 5)])
def test_split_rows_covers_every_row_once_in_nearly_equal_parts(n, parts):
    ranges = split_rows(n, parts)
    assert len(ranges) == parts
    assert ranges[0][0] == 0 and ranges[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [stop - start for start, stop in ranges]
    assert max(sizes) - min(sizes) <= 1


def _rows(chunk_rows, spans):
    """The global row numbers each batch reads."""
    offsets = np.cumsum([0] + list(chunk_rows))
    return [np.concatenate([np.arange(offsets[j] + a, offsets[j] + b) for j, a, b in pieces]) for pieces in spans]


@pytest.mark.parametrize("chunk_rows, batch_size", [((50,) * 6, 64), ((100, 37, 250, 13), 32), ((7,), 3),
                                                    ((1000, 1000), 4096), ((3, 3), 3), ((40, 0, 60), 25)])
def test_an_epoch_reads_every_row_once_each_chunk_in_order(chunk_rows, batch_size):
    spans = batch_spans(chunk_rows, batch_size)
    n = sum(chunk_rows)
    assert len(spans) == -(-n // batch_size)
    rows = np.concatenate(_rows(chunk_rows, spans))
    assert sorted(rows.tolist()) == list(range(n))
    for j in range(len(chunk_rows)):              # a chunk is read front to back, batch after batch
        starts = [a for pieces in spans for jj, a, _ in pieces if jj == j]
        assert starts == sorted(starts)
    # a batch is the batch size, give or take a row per chunk (the last one what is left)
    sizes = [len(r) for r in _rows(chunk_rows, spans)]
    assert all(abs(s - batch_size) < len(chunk_rows) for s in sizes[:-1])
    assert sum(sizes) == n


def test_each_batch_takes_a_proportional_share_of_every_chunk():
    # a chunk three times as long gives three times the rows to each batch: with the chunks on two workers,
    # both work on every step
    spans = batch_spans((300, 100), 40)
    assert len(spans) == 10
    assert all([(j, b - a) for j, a, b in pieces] == [(0, 30), (1, 10)] for pieces in spans)


def test_batch_spans_refuses_a_batch_size_below_one_and_no_rows():
    with pytest.raises(ValueError, match="batch_size must be positive"):
        batch_spans((10,), 0)
    with pytest.raises(ValueError, match="no rows"):
        batch_spans((0, 0), 4)
