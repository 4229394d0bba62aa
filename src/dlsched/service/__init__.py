"""dlsched.service"""
