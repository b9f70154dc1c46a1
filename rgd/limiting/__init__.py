"""The local limiter, pure (time is passed in): what one daemon admits of its share.

- token_bucket.py: a token bucket with debt, the one rate-limiting algorithm;
- second_window.py, window_turns.py: the cap on any 1-second window at small quotas;
- limiter.py: the buckets of every (group, kind) and the decisions brokers get.
"""
