"""The orchestrator's running a sweep: its file, its cells as Ray Tune trials, results storage, tracking."""
