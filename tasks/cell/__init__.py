"""One cell: its plan, a pure function of the spec, and the execution of that plan."""
