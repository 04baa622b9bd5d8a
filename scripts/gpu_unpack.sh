#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Sourced by scripts/gpu_run.sh and scripts/gpu_call.sh on the device: a
# pack that scripts/gpu_pack.sh carried as $1/pack.tar.xz is unpacked in
# place, once (the tarball is removed after), with tar's xz or, where the
# machine has no xz, Python's lzma. Nothing happens to a plain folder.
gpu_unpack() {
  local dir=$1
  [ -f "$dir/pack.tar.xz" ] || return 0
  if command -v xz >/dev/null 2>&1; then
    tar -C "$dir" -xJf "$dir/pack.tar.xz" || return 1
  else
    python3 -c 'import sys, tarfile
safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
tarfile.open(sys.argv[1], "r:xz").extractall(sys.argv[2], **safe)' "$dir/pack.tar.xz" "$dir" || return 1
  fi
  rm -f "$dir/pack.tar.xz"
}
