"""The mutation suite: a registry of named mutations, a sandboxed runner, and reports."""
