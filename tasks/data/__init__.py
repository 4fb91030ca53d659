"""Records and their split: the disjoint parts of a dataset a cell trains on, scores and holds out."""
