"""The shelf_kv wheel: the `shelf` package (pure Python over libshelf's C
API through ctypes) with libshelf.so and the libraries it needs in
shelf/_libs/. Built by client/wheel/build_wheel.py (the CMake target
`wheel`), which stages this folder with the libraries and VERSION first."""

import pathlib

from setuptools import setup
from setuptools.dist import Distribution
from wheel.bdist_wheel import bdist_wheel

HERE = pathlib.Path(__file__).resolve().parent


class LibraryDistribution(Distribution):
    """Holds native libraries (not extension modules): installed as
    platform-specific files, at the wheel's root."""

    def has_ext_modules(self):
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for any CPython 3 (no extension module: ctypes) on x86-64
    Linux (the libraries it carries): py3-none-linux_x86_64."""

    def get_tag(self):
        return "py3", "none", "linux_x86_64"


setup(
    name="shelf_kv",
    version=(HERE / "VERSION").read_text().strip(),
    description="Shelf's client: a distributed KV-cache block store for LLM inference",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="The bundled libraries are under their own licences: shelf/_libs/licenses/",
    python_requires=">=3.9",
    packages=["shelf"],
    package_data={"shelf": ["_libs/*.so*", "_libs/BUNDLED.txt", "_libs/licenses/*"]},
    include_package_data=False,
    zip_safe=False,
    distclass=LibraryDistribution,
    cmdclass={"bdist_wheel": PlatformWheel},
)
