"""queuelog's own benchmark: the full job cycle over real HTTP, with Huey as a reference.

Run it with ``make bench`` (about three minutes) or ``make bench-quick``.
"""
