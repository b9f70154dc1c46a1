"""The Pulsar edge: the session that publishes and reads usage reports and config
changes (`session.py`), the embedded pulsar-lite broker a one-machine run starts
(`embedded_broker.py`), and whether the broker still carries our messages
(`broker_liveness.py`)."""
