"""PostgreSQL backend: several queuelog nodes on one database (see store.py)."""
