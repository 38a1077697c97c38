"""The aiohttp application: filter, bind, webhook, health, metrics, TLS."""
