"""Test harness importable by tests and mutations: counters, the seam harness, the bypass predicate."""
