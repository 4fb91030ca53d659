"""Training an adaptation: the loop, its snapshots and loss receipts, under a defence or DeepSpeed."""
