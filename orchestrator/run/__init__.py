"""The orchestrator's running a sweep: its cells as Ray Tune trials, views and attacks as Ray tasks, DeepSpeed
under Ray Train, progress."""
