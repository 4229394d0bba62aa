"""dlsched.sim"""
