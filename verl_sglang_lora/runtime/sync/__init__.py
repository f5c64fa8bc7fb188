"""Adapter sync protocol: bounded buckets, versioned adapter names, retention, canary."""
