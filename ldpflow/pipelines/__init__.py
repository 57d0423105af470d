"""Runnable jobs: options, one module per job with ``run(argv)``, and the ``ldpflow`` CLI."""

__all__: list[str] = []
