"""Example environments for users to copy (see envs/README.md)."""
