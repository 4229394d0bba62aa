"""FLEET runtime: real processes sharing a torch shared-memory ring; real training with early stopping."""
import threading
import time
from pathlib import Path

import pytest
import torch

from dlsched.errors import UserError
from tests.waiting import wait_until
from dlsched.train.flotilla import (
    CTX, Augment, BatchRing, Convergence, MemberSpec, RandomCrop, RandomHorizontalFlip, cifar_train_transform,
    eval_transform, load_model_class, producer_main, run_flotillas, synthetic_images,
)

MODELS = Path(__file__).resolve().parents[2] / "examples" / "ensemble" / "models.py"
RECORDING = Path(__file__).resolve().parent / "recording_models.py"


def _read_slot_ptr(ring, index, out):
    x, _ = ring.get(index)
    out.put((x.data_ptr(), float(x.sum())))
    ring.release(index, 0)


def test_transforms_crop_pad_and_flip_like_torchvision():
    img = torch.arange(2 * 4 * 4, dtype=torch.uint8).view(2, 4, 4)
    g = torch.Generator().manual_seed(0)
    crops = [RandomCrop(4, padding=2)(img, g) for _ in range(50)]
    assert all(c.shape == (2, 4, 4) for c in crops)
    assert any((c == 0).any() for c in crops) and any(torch.equal(c, img) for c in crops)   # padding shows; offset 0 too
    flips = {RandomHorizontalFlip()(img, g)[0, 0, 0].item() for _ in range(50)}
    assert flips == {img[0, 0, 0].item(), img[0, 0, -1].item()}
    out = cifar_train_transform(32)(synthetic_images(1)[0][0], g)
    assert out.dtype == torch.float32 and out.shape == (3, 32, 32) and -3 < out.mean() < 3


def test_the_shared_pipeline_augments_as_the_data_set_says():
    """Every data set got CIFAR's pad-4 crop and flip: on 8 x 8 digits (a shift of half the image, mirrored digits)
    a linear model reached 0.24 validation accuracy instead of 0.97."""
    images, labels = synthetic_images(16, size=8)
    ring = BatchRing(slots=1, batch=16, shape=(3, 8, 8), consumers=1)
    producer = threading.Thread(target=producer_main, args=(ring, images, labels, 0), daemon=True,
                                kwargs={"augment": Augment(crop_padding=0, flip=False)})
    producer.start()
    wait_until(lambda: ring.seq[0] == 0 or not producer.is_alive(), timeout=60, what="the producer's first batch")
    assert ring.seq[0] == 0, "the producer died"
    x, y = ring.get(0)
    clean = eval_transform(images)
    # batch 0 is a shuffle of all 16 images, each exactly as validation sees it
    assert sorted(int(torch.argmin(((clean - row) ** 2).flatten(1).sum(1))) for row in x) == list(range(16))
    assert all(torch.allclose(row, clean[int(torch.argmin(((clean - row) ** 2).flatten(1).sum(1)))]) for row in x)
    ring.leave(0)
    producer.join(timeout=30)
    g = torch.Generator().manual_seed(0)
    default = cifar_train_transform(8)
    assert any(not torch.allclose(default(im, g), c) for im, c in zip(images, clean))   # CIFAR's, unless told


def test_consumer_reads_the_producers_memory_in_place():
    ring = BatchRing(slots=2, batch=4, shape=(3, 8, 8), consumers=1)
    ring.put(0, torch.ones(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))
    q = CTX.Queue()
    p = CTX.Process(target=_read_slot_ptr, args=(ring, 0, q))
    p.start()
    ptr, total = q.get(timeout=60)
    p.join()
    assert total == 4 * 3 * 8 * 8
    # The slot lives in shared memory; a consumer gets a view (no per-consumer copy) of it.
    assert ring.images.is_shared() and ring.get(0)[0].data_ptr() == ring.images[0].data_ptr()
    assert ring.pending[0] == 0


def test_backpressure_a_slot_is_reused_only_after_every_consumer_released_it():
    ring = BatchRing(slots=1, batch=2, shape=(1,), consumers=2)
    assert ring.put(0, torch.zeros(2, 1), torch.zeros(2, dtype=torch.long))
    done = threading.Event()
    threading.Thread(target=lambda: (ring.put(1, torch.ones(2, 1), torch.ones(2, dtype=torch.long)), done.set()), daemon=True).start()
    ring.release(0, 0)
    time.sleep(0.3)
    assert not done.is_set()            # consumer 1 still holds batch 0
    ring.leave(1)                        # a converged member leaves: it must not hold the producer back
    assert done.wait(5) and ring.seq[0] == 1 and ring.pending[0] == 0b01


def test_bad_model_reference_is_one_clear_line():
    with pytest.raises(UserError, match="has no Nope"):
        load_model_class(f"{MODELS}:Nope")
    with pytest.raises(UserError, match="expected 'module:Class'"):
        load_model_class("justamodule")


@pytest.mark.slow
def test_shared_flotilla_delivers_the_same_batches_to_every_member(tmp_path):
    data, val = synthetic_images(256, seed=0), synthetic_images(32, seed=1)
    members = [MemberSpec(n, f"{MODELS}:MLPHead", {"hidden": 8}) for n in ("a", "b", "c")]
    conv = Convergence(patience=10**6, max_epochs=10**6)
    got = []
    _, (run,) = run_flotillas([members], data, val, 32, conv, tmp_path, CTX.Queue(), max_batches=12, on_report=got.append)
    final = {m[0]: m[3] for m in got if m[4] is None}
    assert final == {"a": 12, "b": 12, "c": 12} and run.producer_cpu_s > 0


def test_a_member_that_fails_is_named_with_its_error(tmp_path):
    """The job's error said only "a member process failed (flotillas [['ok', 'bad']])": which member and why were
    in a traceback in the log (here a head of 4 classes on labels of 10: IndexError in the loss)."""
    data, val = synthetic_images(256, seed=0), synthetic_images(32, seed=1)
    members = [MemberSpec("ok", f"{MODELS}:MLPHead", {"hidden": 8}),
               MemberSpec("bad", f"{MODELS}:MLPHead", {"hidden": 8, "classes": 4})]
    conv = Convergence(patience=10**6, max_epochs=10**6)
    with pytest.raises(RuntimeError, match=r"^member bad failed: IndexError: Target \d+ is out of bounds"):
        run_flotillas([members], data, val, 32, conv, tmp_path, CTX.Queue(), max_batches=12)


def test_a_data_parallel_members_ranks_leave_without_freeing_their_model(tmp_path):
    """A DDP rank that freed its model on the way out could deadlock: the Reducer's gloo process group, destroyed
    with the GIL held, waits on gloo's work thread, which waits for the GIL (py-spy of a rank hung 30 s until
    run_flotillas killed it; the service's ensemble held its slots meanwhile, e.g. after its last member left). The
    hang is a race; what the test can see is that the ranks no longer free the model: they report, checkpoint and
    leave."""
    data, val = synthetic_images(256, seed=0), synthetic_images(32, seed=1)
    marker = tmp_path / "freed"
    members = [MemberSpec("dp", f"{RECORDING}:FreedMLP", {"marker": str(marker)})]
    got = []
    _, (run,) = run_flotillas([members], data, val, 32, Convergence(patience=10**6, max_epochs=10**6), tmp_path,
                              CTX.Queue(), max_batches=4, workers={"dp": 2}, on_report=got.append)
    assert run.workers == (2,) and {m[0]: m[3] for m in got if m[4] is None} == {"dp": 4}
    assert (tmp_path / "dp.pt").is_file()
    assert not list(tmp_path.glob("freed.*")), "a rank freed its DDP model on the way out"


@pytest.mark.slow
def test_a_data_parallel_member_splits_each_shared_batch_over_its_workers(tmp_path):
    data, val = synthetic_images(256, seed=0), synthetic_images(32, seed=1)
    members = [MemberSpec("dp", f"{MODELS}:MLPHead", {"hidden": 8}), MemberSpec("solo", f"{MODELS}:MLPHead", {"hidden": 8})]
    conv = Convergence(patience=10**6, max_epochs=10**6)
    got = []
    _, (run,) = run_flotillas([members], data, val, 32, conv, tmp_path, CTX.Queue(), max_batches=16,
                              workers={"dp": 2}, on_report=got.append)
    assert run.workers == (2, 1)
    final = {m[0]: m[3] for m in got if m[4] is None}
    assert final == {"dp": 16, "solo": 16}           # one report per member (rank 0), both ranks in lock-step
    # DDP kept the two ranks identical; the checkpoint (rank 0) loads into a fresh model.
    cls = load_model_class(f"{MODELS}:MLPHead")
    cls(hidden=8).load_state_dict(torch.load(tmp_path / "dp.pt", weights_only=False)["model"])


RUN_A_FLOTILLA = """
import sys
from dlsched.train.flotilla import CTX, Convergence, MemberSpec, run_flotillas, synthetic_images
member = MemberSpec("slow", sys.argv[1] + ":SlowWideCNN", {"width": 4, "step_s": 0.05})
run_flotillas([[member]], synthetic_images(256, seed=0), synthetic_images(32, seed=1), 32,
              Convergence(patience=10**6, max_epochs=10**6), sys.argv[2], CTX.Queue(), on_report=print)
"""


def test_members_and_producers_die_with_the_process_that_forked_them(tmp_path):
    """A SIGKILLed ensemble runtime's members trained on as orphans, writing the checkpoints that the restarted
    runtime then resumed from (a member went to epoch 21 of its 20)."""
    import os
    import signal
    import subprocess
    import sys

    import psutil

    slow = Path(__file__).resolve().parent / "slow_models.py"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    runtime = subprocess.Popen([sys.executable, "-c", RUN_A_FLOTILLA, str(slow), str(tmp_path)], env=env,
                               stdout=subprocess.PIPE, text=True)
    forked = []
    try:
        assert runtime.stdout.readline()                   # a member's first report: it trains
        forked = psutil.Process(runtime.pid).children()
        assert len(forked) == 2                            # the member and the producer
        os.kill(runtime.pid, signal.SIGKILL)
        runtime.wait()
        gone, alive = psutil.wait_procs(forked, timeout=30)
        assert not alive, f"orphans still running: {alive}"
    finally:
        runtime.kill()
        runtime.wait()
        for p in forked:
            try:
                p.kill()
            except psutil.Error:
                pass


class _Payload:
    """What a pickle runs as it loads: touches the file named in it."""

    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (Path.touch, (Path(self.target),))


def test_a_members_checkpoint_is_read_as_data_and_a_pickle_in_its_place_runs_nothing(tmp_path):
    """A member resumes from ``<name>.pt`` in the job folder: read with a pickle load, a file there that named a
    callable ran it as the service's user. A real epoch checkpoint (weights, SGD momentum, counters) reads back as
    before; the planted one is refused and its code never runs."""
    from dlsched.train.flotilla import _save_atomic, load_member_checkpoint

    net = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.ones(3, 4)).sum().backward()
    opt.step()
    state = {"step": 7, "epoch": 1, "best": 0.5, "bad": 0, "history": [0.25, 0.5]}
    _save_atomic({"model": net.state_dict(), "opt": opt.state_dict(), "state": state}, tmp_path / "m.pt")
    saved = load_member_checkpoint(tmp_path / "m.pt")
    assert saved["state"] == state and torch.equal(saved["model"]["weight"], net.weight)
    again = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    again.load_state_dict(saved["opt"])
    assert torch.equal(again.state_dict()["state"][0]["momentum_buffer"], opt.state_dict()["state"][0]["momentum_buffer"])

    planted = tmp_path / "evil.pt"
    torch.save({"model": {}, "opt": {}, "state": _Payload(str(tmp_path / "PWNED"))}, planted)
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        load_member_checkpoint(planted)
    assert not (tmp_path / "PWNED").exists()


def test_a_data_parallel_members_rank_killed_by_a_signal_is_a_lost_member_not_its_failure(tmp_path):
    """Rank 1 of a 2-rank member SIGKILLed (the OOM killer's pick): rank 0's all-reduce fails ('Connection reset by
    peer') and reports the member failed; the service's ensemble failed with it ('member tiny8 failed: RuntimeError:
    ... gloo ... Connection reset by peer') where a killed process resumes every member from its checkpoint."""
    import psutil

    from dlsched.train.flotilla import MemberLost

    data, val = synthetic_images(256, seed=0), synthetic_images(32, seed=1)
    members = [MemberSpec("dp", f"{MODELS}:MLPHead", {"hidden": 8})]
    killed = []

    def kill_rank_1(msg):
        if not killed and msg[3] >= 10:   # steps flow: both ranks are in the all-reduce
            rank1 = max(psutil.Process().children(), key=lambda c: c.create_time())   # producer, rank 0, rank 1
            rank1.kill()
            killed.append(rank1.pid)

    with pytest.raises(MemberLost) as lost:
        run_flotillas([members], data, val, 32, Convergence(patience=10**6, max_epochs=10**6), tmp_path, CTX.Queue(),
                      workers={"dp": 2}, on_report=kill_rank_1)
    assert killed and lost.value.lost == [("dp", -9)], lost.value.lost
