"""The shelf_kv_mooncake wheel: `mooncake.store` answered by Shelf
(shelf.mooncake of the shelf_kv wheel). Pure Python; installing it is the
explicit choice to let Shelf answer `import mooncake.store`. Built by
client/wheel/build_wheel.py, which stages client/python/compat/mooncake
here with VERSION first."""

import pathlib

from setuptools import setup

HERE = pathlib.Path(__file__).resolve().parent
VERSION = (HERE / "VERSION").read_text().strip()

setup(
    name="shelf_kv_mooncake",
    version=VERSION,
    description="mooncake.store (Mooncake Store's Python API) answered by a Shelf cluster",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=["mooncake"],
    install_requires=[f"shelf_kv=={VERSION}"],
    zip_safe=False,
)
