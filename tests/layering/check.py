#!/usr/bin/env python3
"""The layering of the tree, checked: a folder includes headers only from
itself and from the folders below it, never from a sibling or a folder
above. Every quoted #include of a tree header ("common/log.h",
"shelf/client.h") in every .h and .cc is checked against LAYERS; the first
folder prefix that matches a file names its layer.

Namespaces follow folders: every namespace a file opens is its folder's
(NAMESPACES) or one nested in it, so `shelf::transport::wire::Session`
lives in transport/ and `shelf::master::Master` in server/master/.
Anonymous namespaces and the forward declarations of other projects'
names (FOREIGN) are the exceptions.

Which library may include which header is enforced by the build itself:
each library's include root holds only its own headers
(cmake/ShelfHelpers.cmake, shelf_cc_library).

    /usr/bin/python3 tests/layering/check.py SOURCE_DIR

Exit status 0 when every include respects the layers, 1 with one line per
offending include otherwise.
"""

import pathlib
import re
import sys

# Each layer: the folders in it and what they may include besides
# themselves. Lower layers come first; "limits" is the one public SDK
# header every layer shares (common/include/shelf/limits.h), "sdk" the
# rest of libshelf's public headers (client/include/shelf/).
LAYERS = {
    "proto": [],
    "limits": [],
    "common": ["limits"],
    "coord": ["common", "limits"],
    "storage": ["common", "limits"],
    "transport": ["common", "limits"],
    "server/master": ["common", "proto", "limits", "coord", "storage", "transport"],
    "server/store": ["common", "proto", "limits", "coord", "storage", "transport"],
    "sdk": ["limits"],
    "client": ["common", "proto", "limits", "coord", "transport", "sdk"],
    "server/resp": ["common", "proto", "limits", "coord", "client", "sdk"],
    "testing": ["common", "proto", "limits", "coord", "storage", "transport", "sdk", "client",
                "server/master", "server/store", "server/resp"],
    "tools": ["common", "proto", "limits", "coord", "storage", "transport", "sdk", "client",
              "server/master", "server/store", "server/resp", "testing"],
}

# The tree's folders -> their layers (longest prefix first).
FOLDERS = [
    ("server/master/", "server/master"),
    ("server/store/", "server/store"),
    ("server/resp/", "server/resp"),
    ("common/", "common"),
    ("coord/", "coord"),
    ("storage/", "storage"),
    ("transport/", "transport"),
    ("client/", "client"),
    ("testing/", "testing"),
    ("tools/", "tools"),
    ("proto/", "proto"),
]
# Where a source file lives -> its layer: the two public include folders,
# then the folders.
FILE_LAYERS = [("common/include/shelf/", "limits"), ("client/include/shelf/", "sdk")] + FOLDERS
# What an include names -> the layer it belongs to: public headers are
# included as "shelf/...".
INCLUDE_LAYERS = [("shelf/limits.h", "limits"), ("shelf/", "sdk")] + FOLDERS + [("tests/", "tests")]

# Each folder's namespace (longest prefix first). The shared vocabulary
# (common/), the SDK (client/) and the test harness (testing/, beside
# GoogleTest's own ::testing) speak `shelf` itself.
NAMESPACES = [
    ("transport/rdma/", "shelf::transport::rdma"),
    ("transport/", "shelf::transport"),
    ("server/master/", "shelf::master"),
    ("server/store/", "shelf::store"),
    ("server/resp/", "shelf::resp"),
    ("coord/", "shelf::coord"),
    ("storage/", "shelf::storage"),
    ("client/python/", "shelf::python"),
    ("client/", "shelf"),
    ("common/", "shelf"),
    ("testing/", "shelf"),
    ("tools/bench/", "shelf::bench"),
    ("tools/", "shelf"),
]
# Other projects' namespaces a file may open to forward-declare their names.
FOREIGN = ("rocksdb", "prometheus", "re2", "pybind11")

NAMESPACE_OPEN = re.compile(r"^namespace ([A-Za-z_][\w:]*) \{", re.M)
NAMESPACE_CLOSE = re.compile(r"^\}  // namespace ([A-Za-z_][\w:]*)", re.M)

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path, table):
    for prefix, layer in table:
        if path.startswith(prefix):
            return layer
    return None


def sources(root):
    """Every .h and .cc of the tree outside build/, tests/ and dot folders,
    as (path, path relative to root)."""
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".cc") or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(("build/", "tests/", ".")):
            yield path, rel


def violations(root):
    out = []
    for path, rel in sources(root):
        layer = layer_of(rel, FILE_LAYERS)
        if layer is None:
            continue
        allowed = {layer, *LAYERS[layer]}
        for lineno, header in lines_including(path):
            target = layer_of(header, INCLUDE_LAYERS)
            if target is None or target in allowed:
                continue
            out.append(f"{rel}:{lineno}: {layer} includes \"{header}\" ({target}), "
                       f"which is not below it")
    return out


def namespace_violations(root):
    """Every named namespace a file opens, spelled out in full (a nested
    `namespace internal {` inside `namespace shelf::coord {` is
    shelf::coord::internal), must be its folder's or nested in it."""
    out = []
    for path, rel in sources(root):
        expected = layer_of(rel, NAMESPACES)
        if expected is None:
            continue
        text = path.read_text(errors="replace")
        events = sorted([(m.start(), "open", m.group(1)) for m in NAMESPACE_OPEN.finditer(text)] +
                        [(m.start(), "close", m.group(1)) for m in NAMESPACE_CLOSE.finditer(text)])
        stack = []
        for pos, kind, name in events:
            if kind == "close":
                if stack:
                    stack.pop()
                continue
            stack.append(name)
            full = "::".join(stack)
            if stack[0].split("::")[0] in FOREIGN:
                continue
            if full != expected and not full.startswith(expected + "::"):
                lineno = text.count("\n", 0, pos) + 1
                out.append(f"{rel}:{lineno}: opens namespace {full}; files in this folder "
                           f"live in {expected}")
    return out


def lines_including(path):
    text = path.read_text(errors="replace")
    for m in INCLUDE.finditer(text):
        yield text.count("\n", 0, m.start()) + 1, m.group(1)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    missing = [layer for deps in LAYERS.values() for layer in deps if layer not in LAYERS]
    if missing:
        print(f"layering: LAYERS names unknown layers {missing}", file=sys.stderr)
        return 2
    found = violations(root)
    misplaced = namespace_violations(root)
    for line in found + misplaced:
        print(line)
    checked = sum(1 for _ in sources(root))
    if found:
        print(f"layering: {len(found)} includes cross the layers (tests/layering/check.py)")
    if misplaced:
        print(f"layering: {len(misplaced)} namespaces do not follow their folders")
    if found or misplaced:
        return 1
    print(f"layering: {checked} sources checked, every include below its layer, "
          f"every namespace its folder's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
