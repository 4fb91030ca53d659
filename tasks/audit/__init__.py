"""Auditing a model someone already adapted: its inputs, the run and the verdict."""
