"""Leakage beyond membership: discoverable extraction, PII reconstruction, canary exposure."""
