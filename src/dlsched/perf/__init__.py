"""dlsched.perf"""
