"""Statistics of attack scores: metrics, paired significance, and the empirical lower bound on epsilon."""
