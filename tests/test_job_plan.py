"""scoring.store.job_plan: store-relative sources and the jobs a run hands out."""

import os

import pytest

from scoring.store.job_plan import _jobs, _relpath


@pytest.mark.parametrize("path,start", [("a/b/c.npz", "store"), ("/x/y.npz", "/x/s"), ("c.npz", "."),
                                        ("../a.npz", "s/t"), ("s/x.npz", "s")])
def test_cached_relpath_equals_os_relpath(path, start):
    assert _relpath(path, start) == os.path.relpath(os.path.abspath(path), os.path.abspath(start))


@pytest.mark.parametrize("n_items,batch,workers", [(300, 16, 2), (300, 16, 1), (5, 16, 2), (0, 16, 2), (1000, 100, 4),
                                                  (17, 16, 2), (64, 4, 2)])
def test_jobs_hand_out_every_item_once_in_order_with_a_shrinking_tail(tmp_path, n_items, batch, workers):
    paths = [tmp_path / f"{i:04d}.npz" for i in range(n_items)]
    sizes, items = [], []
    for job in _jobs(paths, set(), batch, [0], tmp_path, workers=workers):
        sizes.append(len(job.items))
        items += [path for _, path, _ in job.items]
    assert items == [str(p) for p in paths]
    assert all(0 < size <= batch for size in sizes)
    if workers == 1:
        assert sizes[:-1] == [batch] * (len(sizes) - 1)  # one worker: nothing to balance
    elif n_items >= batch * (workers + 1):
        # full jobs first, then smaller and smaller ones so the workers finish together
        assert sizes == sorted(sizes, reverse=True) and sizes[-2] < batch and sizes[0] == batch, sizes


def test_jsonl_lines_are_byte_ranges_and_done_files_are_skipped(tmp_path):
    lines = tmp_path / "a.jsonl"
    lines.write_bytes(b'{"x": 1}\n\n{"x": 2}\n')
    done, todo = tmp_path / "done.npz", tmp_path / "todo.npz"
    skipped = [0]
    jobs = list(_jobs([lines, done, todo], {"done.npz"}, 16, skipped, tmp_path, workers=2))
    items = [item for job in jobs for item in job.items]
    assert items == [("span", (str(lines), 0, 9), f"{lines}:1"), ("span", (str(lines), 10, 9), f"{lines}:3"),
                     ("file", str(todo), str(todo))]
    assert skipped == [1]
