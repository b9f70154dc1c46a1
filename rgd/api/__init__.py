"""HTTP API (aiohttp): broker routes, admin v2 routes, operations routes; see rgd/openapi.json."""
