"""Support for testing and local development: the Pub/Sub emulator."""

__all__: list[str] = []
