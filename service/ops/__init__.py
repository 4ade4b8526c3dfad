"""Operators' surfaces: the admin API and the command line."""
