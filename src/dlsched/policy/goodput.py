"""Pollux-style goodput scheduling (Qiao et al., OSDI'21) on the elastic DP engine.

Goodput = throughput x statistical efficiency: samples/s that count, because a large batch makes less progress per
sample (``ThroughputModel.efficiency``, from the gradient noise scale in ``perf/efficiency.py``). For every GPU count
the batch that maximises goodput is chosen, not the fastest one, and the DP maximises the sum of goodput speed-ups
(each job's goodput relative to its smallest configuration). Pollux searches allocations with a genetic algorithm;
the DP here is exact for this separable objective and runs in milliseconds (see bench/goodput_sim_time.py).
"""
from __future__ import annotations

from dlsched.policy.base import ThroughputModel, register
from dlsched.policy.elastic import ElasticPolicy


def goodput(speed: ThroughputModel, num_gpus: int, num_nodes: int, global_batch: int,
            gpu_type: str | None = None) -> float:
    """Useful samples/s: throughput times the statistical efficiency of the global batch."""
    return speed.throughput(num_gpus, num_nodes, global_batch, gpu_type) * speed.efficiency(global_batch)


@register("goodput")
def make_goodput(hysteresis: float = 0.0, urgency: float = 0.5, restart_cost: float = 30.0,
                 fairness: float = 1.0, whole_nodes: bool = False, restart_budget: bool = True,
                 packing: bool = True, request_prior: float = 0.5,
                 aging_hysteresis: float = 0.05, release_horizon: bool = True,
                 budget_run_clock: bool = True, grow_pause: bool = True, size_prior: str = "gittins") -> ElasticPolicy:
    """Defaults measured on Pollux workloads 1-4 (docs/policies.md): best-fit packing, Pollux's age-based
    restart budget in place of a fixed hysteresis, and without remaining-work information the requested GPUs as a
    prior on a job's size (``request_prior``) and a margin before a waiting job displaces a running one
    (``aging_hysteresis``: against restart churn under run-time aging). With predicted remaining work, together:
    ``release_horizon`` (a preemption or shrink pays the victim's pauses over the time until capacity frees
    anyway) and ``budget_run_clock`` (the restart budget ages a job by the time it has held GPUs): 0.910 -> 0.898 x
    Pollux over 16 decision-clock phases, each alone at most half of that (docs/policies.md). ``grow_pause``: a
    running job's grow also repays the pause of the job it may displace (``elastic.charge_grow``; live, a job 2 s from
    its end was grown by pre-empting another). ``size_prior`` "gittins": without remaining work, jobs whose run time is
    their work (duration jobs) are ranked by the Gittins index over the sizes of those that finished (``gittins.py``);
    "aging": least attained first for all."""
    return ElasticPolicy("goodput", fixed_batch=False, value=goodput, hysteresis=hysteresis, urgency=urgency,
                         restart_cost=restart_cost, fairness=fairness, whole_nodes=whole_nodes,
                         restart_budget=restart_budget, packing=packing, request_prior=request_prior,
                         aging_hysteresis=aging_hysteresis, release_horizon=release_horizon,
                         budget_run_clock=budget_run_clock, grow_pause=grow_pause, size_prior=size_prior)


@register("goodput-fair")
def make_goodput_fair(hysteresis: float = 0.05, urgency: float = 0.5, restart_cost: float = 30.0,
                      fairness: float = -1.0, restart_budget: bool = False, packing: bool = True,
                      fair_share_base: bool = True, size_prior: str = "gittins") -> ElasticPolicy:
    """Pollux's fairness power mean (p = -1) over goodput speed-ups relative to a fair share of the cluster (Pollux's
    base), weighted by urgency as ``goodput``."""
    return ElasticPolicy("goodput-fair", fixed_batch=False, value=goodput, hysteresis=hysteresis, urgency=urgency,
                         restart_cost=restart_cost, fairness=fairness, restart_budget=restart_budget,
                         packing=packing, fair_share_base=fair_share_base, size_prior=size_prior)
