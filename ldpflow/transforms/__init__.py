"""Apache Beam transforms over the core objects: reading, validation, combining, writing."""

__all__: list[str] = []
