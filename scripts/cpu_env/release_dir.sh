# Shared by scripts/sglang_release.sh, scripts/verl_release_env.sh and scripts/megatron_bridge_release.sh (sourced): a release is installed with
# `pip --no-deps --target` into a temporary dir, its version checked there, then swapped into place; a stamp of the inputs
# skips all of it when nothing changed. Expects ROOT, VERSION, TARGET and STAMP to be set.

# release_stamp FILE...: hash of the given inputs, the version and the main venv's dependency stamp
release_stamp() {
  { cat "$@"; echo "$VERSION"; cat "$ROOT/.venv/.vsl_cpu_deps_stamp" 2>/dev/null || true; } | sha256sum | cut -d' ' -f1
}

# release_up_to_date WANT: true when TARGET was built from the same inputs (VSL_FORCE=1 rebuilds)
release_up_to_date() {
  [ -z "${VSL_FORCE:-}" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$1" ]
}

# release_begin: sets TMP (removed on exit unless finished) and find_links (VSL_WHEEL_DIR, if set)
release_begin() {
  TMP="$TARGET.tmp.$$"
  rm -rf "$TMP"
  trap 'rm -rf "$TMP"' EXIT
  mkdir -p "$(dirname "$TARGET")"
  find_links=()
  if [ -n "${VSL_WHEEL_DIR:-}" ]; then find_links=(--find-links "$VSL_WHEEL_DIR"); fi
}

# release_pip ARGS...: `pip install --no-deps --target $TMP ARGS` with the venv's pip (and release_begin's find-links);
# returns pip's exit code
release_pip() {
  local st
  set +e
  "$VPY" -m pip --disable-pip-version-check install -q --progress-bar off --no-deps --no-compile \
    --target "$TMP" "${find_links[@]+"${find_links[@]}"}" "$@" 2>&1 | grep -v "^WARNING: Location 'file:///"
  st=("${PIPESTATUS[@]}")
  set -e
  return "${st[0]}"
}

# release_dist_version DIR NAME: the version of NAME's dist-info in DIR (no import)
release_dist_version() {
  local meta
  meta="$(ls -d "$1/$2"-*.dist-info 2>/dev/null | head -1)"
  [ -n "$meta" ] && sed -n 's/^Version: //p' "$meta/METADATA" | head -1
}

# release_finish WANT: swap TMP in as TARGET, point probe.json (if probed) at the final path, write the stamp
release_finish() {
  rm -rf "$TARGET"
  mv "$TMP" "$TARGET"
  trap - EXIT
  if [ -f "$TARGET/probe.json" ]; then sed -i "s#$TMP#$TARGET#g" "$TARGET/probe.json"; fi
  echo "$1" > "$STAMP"
}
