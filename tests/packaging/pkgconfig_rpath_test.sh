#!/usr/bin/env bash
# pkgconfig_rpath_test.sh BUILD
# Installs the client and dev components into a temporary prefix, builds a
# small program with `pkg-config --cflags --libs relaxps` only, and runs it
# with no LD_LIBRARY_PATH: it must find the prefix's librelaxps_client.so
# (through the -Wl,-rpath in the .pc's Libs). The same after moving the
# prefix; and without the rpath (--define-variable=rpath=) the program must
# not start, so the check above is not passing by luck. Finally a /usr
# install (DESTDIR) gets a plain relaxps.pc: prefix=/usr, no RPATH.
set -euo pipefail
BUILD=$1
SAN=${RELAXPS_SANITIZER_FLAGS:-}  # Set in sanitizer builds: the .so is instrumented.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
unset LD_LIBRARY_PATH
fail() { echo "FAIL: $*" >&2; exit 1; }

for c in client dev; do
  cmake --install "$BUILD" --prefix "$TMP/prefix" --component "$c" >/dev/null
done
pc=$(find "$TMP/prefix" -name relaxps.pc)
[ -n "$pc" ] || fail "no relaxps.pc installed"
echo "installed $pc:"; grep -E '^(rpath=|Libs:)' "$pc"

cat >"$TMP/tiny.cc" <<'CC'
// Links librelaxps_client.so: a malformed endpoint fails Connect() at once.
#include <relaxps/client.h>

#include <cstdio>

int main() {
  relaxps::ClientOptions options;
  options.coordinator = "127.0.0.1:1";  // No tcp:// scheme.
  auto client = relaxps::Client::Connect(options);
  if (client.ok() || client.status().code() != relaxps::StatusCode::kInvalidArgument) return 1;
  std::printf("librelaxps_client answered: %s\n", client.status().ToString().c_str());
  return 0;
}
CC
build_and_run() {  # build_and_run PKG_CONFIG_PATH OUTPUT [pkg-config args...]
  local path=$1 out=$2
  shift 2
  g++ -std=c++17 -Wall -Wextra -Werror $SAN "$TMP/tiny.cc" -o "$out" \
    $(PKG_CONFIG_PATH="$path" pkg-config --cflags --libs "$@" relaxps)
  "$out"
}
rel_pcdir=${pc#"$TMP/prefix/"}
rel_pcdir=$(dirname "$rel_pcdir")

build_and_run "$TMP/prefix/$rel_pcdir" "$TMP/tiny" || fail "the pkg-config-built program did not run"
ldd "$TMP/tiny" | grep librelaxps_client | grep -q "$TMP/prefix/" ||
  fail "librelaxps_client not found in the prefix: $(ldd "$TMP/tiny")"
echo "runs from $TMP/prefix without LD_LIBRARY_PATH"

mv "$TMP/prefix" "$TMP/moved"
build_and_run "$TMP/moved/$rel_pcdir" "$TMP/tiny_moved" || fail "not after moving the prefix"
echo "runs from the moved prefix $TMP/moved"

# Without the rpath the program must not start (so the checks above mean something).
if build_and_run "$TMP/moved/$rel_pcdir" "$TMP/tiny_norpath" --define-variable=rpath= 2>"$TMP/err"; then
  fail "a program built without the rpath ran: the check proves nothing"
fi
grep -q "librelaxps_client.so" "$TMP/err" || fail "unexpected failure without rpath: $(cat "$TMP/err")"
echo "without the rpath: $(head -n 1 "$TMP/err")"

# A /usr install (what cpack packages): no RPATH in the .pc.
DESTDIR="$TMP/destdir" cmake --install "$BUILD" --prefix /usr --component dev >/dev/null
usr_pc=$(find "$TMP/destdir" -name relaxps.pc)
grep -qx 'rpath=' "$usr_pc" || fail "a /usr install's relaxps.pc has an rpath: $(grep rpath "$usr_pc")"
grep -qx 'prefix=/usr' "$usr_pc" || fail "a /usr install's relaxps.pc: $(grep prefix= "$usr_pc")"
echo "the /usr install's relaxps.pc: prefix=/usr, empty rpath"
echo "PASS"
