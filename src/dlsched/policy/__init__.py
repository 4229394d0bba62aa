"""Scheduling policies: one module per policy, all registered by name in ``base``."""
from dlsched.policy.base import (Allocation, ClusterView, JobAllocation, JobView, NodeView, Policy,
                                 ThroughputModel, make_policy, policy_names, register)

__all__ = ["Allocation", "ClusterView", "JobAllocation", "JobView", "NodeView", "Policy", "ThroughputModel",
           "make_policy", "policy_names", "register"]
