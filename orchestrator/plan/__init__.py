"""The orchestrator's planning: what a sweep will cost before it runs."""
