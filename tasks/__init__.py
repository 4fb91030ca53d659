"""Units of work that need no cluster: models, datasets, splits, adaptation, scoring, attacks, metrics.

Everything here runs in a plain Python process. It never imports ``privauditor.orchestrator``, Ray Tune
or W&B, so a single cell can be reproduced and debugged without a cluster.
"""
