"""dlsched: a resource scheduler for deep-learning training clusters."""
__version__ = "0.1.0"
