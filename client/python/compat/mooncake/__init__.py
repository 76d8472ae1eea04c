"""Opt-in stand-in for Mooncake's `mooncake` package, backed by a Shelf
cluster (shelf.mooncake). Only `mooncake.store` is provided; see
docs/mooncake-compat.md. Installed by the shelf_kv_mooncake wheel, or put
this directory's parent on PYTHONPATH: either is the explicit choice to let
Shelf answer `import mooncake.store`.

It refuses to load when Mooncake's own package is installed too: both
provide `mooncake`, and which one an engine gets would depend on the order
of sys.path (pip cannot keep the two from being installed together)."""


def _mooncake_distribution():
    """The name of an installed distribution of Mooncake's own (for
    example mooncake-transfer-engine), or None."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8 has no importlib.metadata
        return None
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower().replace("_", "-")
        if name.startswith("mooncake"):
            return dist.metadata.get("Name")
    return None


_theirs = _mooncake_distribution()
if _theirs is not None:
    raise ImportError(
        f"Shelf's mooncake.store stand-in will not load: Mooncake's own package "
        f"'{_theirs}' is installed too, and both provide the 'mooncake' package. Keep one: "
        f"'pip uninstall {_theirs}' to use Shelf, or 'pip uninstall shelf_kv_mooncake' (and "
        f"take Shelf's compat folder off PYTHONPATH) to use Mooncake.")
