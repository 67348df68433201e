"""Benchmarks against a ready server: a fixed, versioned prompt set and a runner over HTTP.

UI-free: `specmon bench`, `specmon sweep` and the console's Experiments screen all use it.
"""
