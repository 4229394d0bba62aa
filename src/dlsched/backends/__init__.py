"""dlsched.backends"""
