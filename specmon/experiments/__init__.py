"""Measuring: benchmarks, sweeps, the ledger, reports and the advisor."""
