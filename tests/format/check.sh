#!/usr/bin/env bash
# check.sh SOURCE_DIR: exit 0 when every C++ source under SOURCE_DIR is
# formatted as .clang-format says; otherwise lists the files and the first
# differences. Sources are git's tracked and untracked-not-ignored files
# when SOURCE_DIR is a checkout, else every .cc/.h outside build folders.
set -euo pipefail
root=$1
cd "$root"
fmt=$(command -v clang-format || command -v clang-format-14 || true)
if [[ -z "$fmt" ]]; then
  echo "check.sh: clang-format not found (deploy/install-deps.sh installs it)" >&2
  exit 1
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu' |
    while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
else
  mapfile -t files < <(find . -path ./build -prune -o -path './build*' -prune -o \
    \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \) -type f -print | sed 's|^\./||')
fi
echo "check.sh: ${#files[@]} files checked"
# One run over all files; each unformatted line is reported as FILE:L:C.
out=$("$fmt" --dry-run "${files[@]}" 2>&1 || true)
if [[ -n "$out" ]]; then
  mapfile -t bad < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: (warning|error)' <<<"$out" | cut -d: -f1 | sort -u)
  echo "check.sh: ${#bad[@]} file(s) not in clang-format's form:"
  printf '  %s\n' "${bad[@]}"
  head -40 <<<"$out"
  echo "fix: clang-format -i ${bad[*]}"
  exit 1
fi
