"""The HTTP API (aiohttp): broker routes, admin v2 routes, operations routes, the listeners and
the Prometheus collectors. They read the daemon through daemon_view.py's protocols; see openapi.json."""
