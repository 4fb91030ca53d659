"""What a cell is: its settings as a user writes them, checked strictly, and the resolved spec its id hashes."""
