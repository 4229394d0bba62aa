"""dlsched.commands"""
