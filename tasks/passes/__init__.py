"""Model passes: a model loaded to score, forward passes reduced to per-token statistics, gradients, neighbours."""
