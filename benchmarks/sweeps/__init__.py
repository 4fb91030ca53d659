"""Sweep files shipped with privauditor (smoke, quick, default, paper)."""
