"""dlsched.train"""
