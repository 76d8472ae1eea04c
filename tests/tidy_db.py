#!/usr/bin/python3
"""A build's compile database as clang-tidy can use it.

    tests/tidy_db.py BUILD_DIR    prints the folder that holds the copy

The tests compile against a precompiled header (SHELF_TEST_PCH in
cmake/ShelfHelpers.cmake). GCC's is a file clang cannot read, and clang-tidy
stops at it, so the copy of BUILD_DIR/compile_commands.json written to
BUILD_DIR/tidy-db/ leaves the header's flags out of every command: clang-tidy
then parses each test from its own includes. The copy is rewritten only when
it would change. tests/tidy.sh and tests/tidy_all.py use it.
"""
import json
import os
import re
import sys

# What CMake adds to a command for a precompiled header, with GCC and clang.
PCH_FLAGS = re.compile(r" -Winvalid-pch"
                       r"| -Xclang -include-pch -Xclang \S+"
                       r"| -Xclang -include -Xclang \S*cmake_pch\.hxx"
                       r"| -include \S*cmake_pch\.hxx"
                       r"| -Xclang -fno-pch-timestamp")


def without_pch(command):
    return PCH_FLAGS.sub("", command)


def tidy_database(build):
    """Writes BUILD/tidy-db/compile_commands.json; returns its folder."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    for e in entries:
        if "command" in e:
            e["command"] = without_pch(e["command"])
        else:
            e["arguments"] = without_pch(" " + " ".join(e["arguments"])).split()
    folder = os.path.join(build, "tidy-db")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "compile_commands.json")
    text = json.dumps(entries, indent=1)
    try:
        with open(path) as f:
            if f.read() == text:
                return folder
    except OSError:
        pass
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: tidy_db.py BUILD_DIR\n")
        sys.exit(2)
    print(tidy_database(os.path.abspath(sys.argv[1])))
