"""The orchestrator's reporting: the leaderboard and its row schema, findings, statistics, pages, exports."""
