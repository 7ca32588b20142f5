"""Backends, found through vt.registry (name -> import path, imported lazily)."""
