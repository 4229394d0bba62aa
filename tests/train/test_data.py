import json
from collections import Counter

import numpy as np

from dlsched.train.data import PartitionTable, committed_sample_ids, epoch_order, rank_shares, split_global_batch


def test_epoch_order_is_deterministic_and_differs_by_epoch():
    assert (epoch_order(100, 3, 0) == epoch_order(100, 3, 0)).all()
    assert not (epoch_order(100, 3, 0) == epoch_order(100, 3, 1)).all()


def test_take_across_partitions_is_exactly_once_and_snapshot_round_trips():
    table = PartitionTable.fresh(103, seed=1, epoch=0, num_partitions=7)
    got = [table.take(10)]
    table = PartitionTable.from_snapshot(json.loads(json.dumps(table.snapshot())))  # through a plan/checkpoint
    while not table.done:
        got.append(table.take(17))
    ids = np.concatenate(got)
    assert sorted(ids.tolist()) == list(range(103))
    assert (ids == epoch_order(103, 1, 0)).all()  # the order never depends on batch or worker count


def test_an_epoch_cut_short_counts_what_it_trained_and_plans_later_epochs_as_long():
    """A script's step limit breaks out of each epoch: its end counted the whole epoch as trained, and the budget
    whole epochs. Whole epochs count as before (no field added to the snapshot)."""
    table = PartitionTable.fresh(100, 0, 0)
    table.advance(30)
    assert (table.trained, table.planned(3)) == (30, 300)   # no cut seen yet: whole epochs
    cut = table.next_epoch()
    assert (cut.trained, cut.planned(3)) == (30, 90)
    cut.advance(10)
    assert (cut.trained, cut.planned(3)) == (40, 90)
    restored = PartitionTable.from_snapshot(json.loads(json.dumps(cut.snapshot())))
    assert restored == cut and restored.copy() == cut
    cut.advance(90)   # an epoch trained whole after all: the next ones count whole
    assert (cut.next_epoch().trained, cut.next_epoch().planned(4)) == (130, 330)
    whole = PartitionTable.fresh(100, 0, 0)
    whole.advance(100)
    assert whole.next_epoch().snapshot() == PartitionTable.fresh(100, 0, 1).snapshot()
    assert whole.next_epoch().trained == 100 and whole.next_epoch().planned(2) == 200


def test_an_epoch_limit_ends_each_epoch_at_its_first_samples():
    table = PartitionTable.fresh(100, 0, 0)
    table.limit = 30
    assert [n for n, _ in rank_shares(table, 8, [4, 4], 0)] == [8, 8, 8, 6]
    table.advance(30)
    assert table.done and table.planned(3) == 90
    nxt = PartitionTable.from_snapshot(json.loads(json.dumps(table.next_epoch().snapshot())))
    assert (nxt.limit, nxt.trained, nxt.remaining, nxt.before) == (30, 30, 30, None)


def test_rank_shares_and_advance_match_successive_takes():
    for shuffle in (True, False):
        table = PartitionTable.fresh(103, seed=2, epoch=1, num_partitions=7, shuffle=shuffle)
        table.take(11)  # mid-partition
        sizes = [7, 6, 6]
        planned = [rank_shares(table, 19, sizes, r) for r in range(3)]
        stepped = table.copy()
        for step in range(len(planned[0])):
            ids = table.take(19)
            stepped.advance(len(ids))
            assert stepped.offsets == table.offsets
            for r, part in enumerate(split_global_batch(ids, sizes)):
                assert planned[r][step] == (len(ids), part.tolist())
        assert table.done and stepped.done


def test_split_global_batch_full_and_short():
    ids = np.arange(10)
    assert [len(s) for s in split_global_batch(ids, [4, 3, 3])] == [4, 3, 3]
    short = split_global_batch(np.arange(5), [4, 3, 3])
    assert np.concatenate(short).tolist() == [0, 1, 2, 3, 4]
    assert [len(s) for s in split_global_batch(np.arange(1), [2, 2])] in ([1, 0], [0, 1])


def test_committed_ids_drop_steps_rolled_back_by_a_restore(tmp_path):
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "worker-0.jsonl").write_text(
        "\n".join(json.dumps(r) for r in [{"generation": 0, "step": 1, "ids": [0, 1]},
                                         {"generation": 0, "step": 2, "ids": [2, 3]},
                                         {"generation": 1, "step": 2, "ids": [2, 3]}]) + '\n{"generation": 1, "st')
    (tmp_path / "progress.jsonl").write_text(json.dumps({"event": "worker_lost", "new_generation": 1,
                                                         "restored_step": 1}) + "\n")
    assert committed_sample_ids(tmp_path) == Counter([0, 1, 2, 3])


def test_committed_ids_drop_what_a_killed_coordinator_trained_after_its_checkpoint(tmp_path):
    """A new coordinator resumed at step 1 (``resumed``): the killed run's step 2 is rolled back, the torn last
    line of progress.jsonl (the kill came mid-write) is skipped."""
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "worker-0.jsonl").write_text(
        "\n".join(json.dumps(r) for r in [{"generation": 0, "step": 1, "ids": [0, 1]},
                                         {"generation": 0, "step": 2, "ids": [2, 3]},
                                         {"generation": 1, "step": 2, "ids": [2, 3]},
                                         {"generation": 1, "step": 3, "ids": [4, 5]}]) + "\n")
    (tmp_path / "progress.jsonl").write_text(
        json.dumps({"step": 2, "generation": 0}) + "\n" +
        json.dumps({"event": "resumed", "new_generation": 1, "restored_step": 1}) + '\n{"step": 3, "gen')
    assert committed_sample_ids(tmp_path) == Counter(range(6))


def test_committed_ids_keep_a_checkpointed_step_whose_progress_line_died_with_the_coordinator(tmp_path):
    """Rank 0 checkpointed step 2 and queued its progress; its node's loss took the coordinator before the line was
    written. The resumed run restored step 2: its ids count once, though no progress line names it."""
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "worker-0.jsonl").write_text(
        "\n".join(json.dumps(r) for r in [{"run": "a", "generation": 0, "step": 1, "ids": [0, 1]},
                                         {"run": "a", "generation": 0, "step": 2, "ids": [2, 3]},
                                         {"run": "a", "generation": 0, "step": 3, "ids": [4, 5]},
                                         {"run": "b", "generation": 1, "step": 3, "ids": [4, 5]}]) + "\n")
    (tmp_path / "progress.jsonl").write_text(
        json.dumps({"run": "a", "step": 1, "generation": 0}) + "\n" +
        json.dumps({"event": "resumed", "new_generation": 1, "restored_step": 2}) + "\n")
    assert committed_sample_ids(tmp_path) == Counter(range(6))


def test_committed_ids_count_the_step_a_lost_peer_cut_once_across_a_shrink_and_a_rejoin(tmp_path):
    """3 workers; worker 2 dies in step 3, after the survivors recorded it (before the all-reduce): they carry on
    from step 2 as generation 1 and train step 3 again, then a newcomer rejoins (generation 2). Before, the cut
    step's records of generation 0 counted too: its ids twice."""
    (tmp_path / "samples").mkdir()
    records = {0: [(0, 1, [0]), (0, 2, [3]), (0, 3, [6]), (1, 3, [6, 7]), (1, 4, [9, 10]), (2, 5, [12])],
               1: [(0, 1, [1]), (0, 2, [4]), (0, 3, [7]), (1, 3, [8]), (1, 4, [11]), (2, 5, [13])],
               2: [(0, 1, [2]), (0, 2, [5]), (0, 3, [8])],
               3: [(2, 5, [14])]}
    for w, recs in records.items():
        (tmp_path / "samples" / f"worker-{w}.jsonl").write_text("".join(
            json.dumps({"run": "r", "generation": g, "step": s, "ids": ids}) + "\n" for g, s, ids in recs))
    (tmp_path / "progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"event": "shrunk", "workers_lost": [2], "new_generation": 1, "step": 2, "workers": 2},
        {"event": "rejoined", "generation": 2, "from_workers": 2, "workers": 3, "step": 4}]))
    assert committed_sample_ids(tmp_path) == Counter(range(15))
