"""Multi-node latencies on a real Ray cluster: a head and 3 one-GPU-slot nodes, each in its own network
namespace with its own IP and /tmp, job folders on a bind-mounted shared directory (tests/multinode/netns.py).
Needs root (network namespaces); CPU workers stand in for GPUs (no GPU was lent to this session).

One run, one service (dlsched serve on the head, Ray backend, elastic test policy), the real runtime (MLP):
  1. submit -> first step across 3 nodes;
  2. kill a node's raylet (not rank 0's) -> the survivors train again (shrink), and the steps lost;
  3. the node comes back -> grow 2 -> 3 (node rejoined -> first 3-worker step; the resize's own pause);
  3b. cut another node's link (ip link set ... down: nothing closes its sockets) -> the survivors train
     again (shrink; train/peer_cut.py), and the steps lost; the link comes back, the node restarts -> 3 again;
  4. side by side, the baseline the shrink replaces: kill the node of rank 0 and the coordinator -> the job
     is re-queued and restarts from its checkpoint on the shared mount -> training again, and the steps lost.
Both node losses are observed by the same service with the same information (Ray's node table).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.multinode.netns import NetnsCluster  # noqa: E402
from tests.multinode.test_cluster import (events, start_service, steps, submit, worker_ips)  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

PARAMS = {"num_samples": 7200, "epochs": 1, "batch_size": 12, "throttle_s": 0.1}


def first_step(cluster, job: int, after: float, workers: int, timeout: float = 300) -> dict:
    return wait_until(lambda: next((r for r in steps(cluster, job) if r["time"] > after and r["workers"] == workers),
                                   None), timeout, f"a step on {workers} workers")


def node_of(cluster, ip: str) -> int:
    return next(n.index for n in cluster.nodes if n.ip == ip)


def main() -> int:
    out: dict[str, float] = {}
    with NetnsCluster(num_nodes=4, slots_per_node=1, head_slots=0) as cluster:
        client = start_service(cluster)
        t_submit = time.time()
        job = submit(client, name="bench", gpus=3, min_gpus=1, max_gpus=3, params=PARAMS)
        first = first_step(cluster, job, t_submit, 3)
        out["submit_to_first_step_3_nodes_s"] = first["time"] - t_submit
        ips = worker_ips(cluster, job)
        assert len(set(ips.values())) == 3, ips

        victim = node_of(cluster, ips[max(ips)])
        wait_until(lambda: len(steps(cluster, job)) >= 10, 120, "10 steps")
        t_kill = time.time()
        cluster.kill_raylet(victim)
        again = first_step(cluster, job, t_kill, 2)
        shrunk = events(cluster, job, "shrunk")
        out["node_loss_to_training_again_shrink_s"] = again["time"] - t_kill
        out["steps_lost_shrink"] = shrunk[0]["lost_steps"] if shrunk else float("nan")

        cluster.kill_node(victim)
        t_back = time.time()
        cluster.start_ray(victim)
        grown = first_step(cluster, job, t_back, 3)
        resized = [r for r in events(cluster, job, "resized") if r["workers"] == 3]
        out["node_back_to_first_step_3_nodes_s"] = grown["time"] - t_back
        out["grow_2_to_3_request_to_step_s"] = resized[-1]["pause_s"] if resized else float("nan")
        out["grow_2_to_3_training_stood_still_s"] = resized[-1]["stall_s"] if resized else float("nan")

        cut = node_of(cluster, worker_ips(cluster, job)[1])           # wid 1: not rank 0, survived so far
        shrinks = len(events(cluster, job, "shrunk"))
        t_cut = time.time()
        cluster.link(cut, up=False)
        try:
            again = first_step(cluster, job, t_cut, 2)
        finally:
            cluster.link(cut, up=True)
        shrunk = events(cluster, job, "shrunk")[shrinks:]
        out["link_cut_to_training_again_shrink_s"] = again["time"] - t_cut
        out["steps_lost_link_cut"] = shrunk[0]["lost_steps"] if shrunk else float("nan")
        cluster.kill_node(cut)                                          # Ray declared it dead: it restarts
        t_back = time.time()
        cluster.start_ray(cut)
        out["link_back_to_first_step_3_nodes_s"] = first_step(cluster, job, t_back, 3)["time"] - t_back

        # baseline: the node of rank 0, which also runs the coordinator (the backend pins the runtime to the
        # node of the first slot on a tie) -> no survivor can regroup the others: restart from the checkpoint
        rank0 = node_of(cluster, worker_ips(cluster, job)[0])
        run = steps(cluster, job)[-1]["run"]
        t_kill = time.time()
        cluster.kill_raylet(rank0)
        resumed = wait_until(lambda: next((r for r in steps(cluster, job) if r["run"] != run), None), 300,
                             "the resumed run's first step")
        lost_at = max(r["step"] for r in steps(cluster, job) if r["run"] == run)
        out["node_loss_to_training_again_restart_s"] = resumed["time"] - t_kill
        out["steps_lost_restart"] = max(0, lost_at - (resumed["step"] - 1))
        client.close()

    target = {"steps_lost_shrink": "target 0", "steps_lost_link_cut": "target 0",
              "link_cut_to_training_again_shrink_s": "bound: gloo's 60 s timeout without the cut (PG_TIMEOUT)"}
    print("bench/multinode.py - head + 3 one-slot nodes in network namespaces, real Ray + real runtime (CPU)")
    for k, v in out.items():
        print(f"  {k:42s} {v:8.2f}  {target.get(k, '')}")
    ratio = out["node_loss_to_training_again_restart_s"] / max(out["node_loss_to_training_again_shrink_s"], 1e-9)
    print(f"  node loss -> training again: restart-from-checkpoint / shrink = {ratio:.2f}x "
          f"(both: the same service, Ray's node table; shrink keeps the survivors' memory, restart reloads the "
          f"last checkpoint, --ckpt-every 5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
