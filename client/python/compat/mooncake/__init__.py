"""Opt-in stand-in for Mooncake's `mooncake` package, backed by a Shelf
cluster (shelf.mooncake). Only `mooncake.store` is provided; see
docs/mooncake-compat.md. Never installed by default: put this directory's
parent on PYTHONPATH to use it."""
