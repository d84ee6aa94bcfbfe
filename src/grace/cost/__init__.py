"""Cost: the price book, $/GPU-hour of each way to get GPUs, the planner and showback."""
