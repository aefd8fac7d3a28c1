"""Subcommands of the ``exactattn`` CLI, one module per group; each has ``register`` and ``run``."""
