"""Speculative proposers behind one interface (vLLM v1's spec_decode/): the draft model and n-gram prompt
lookup (proposers.py), every piece of state keyed by request id."""
