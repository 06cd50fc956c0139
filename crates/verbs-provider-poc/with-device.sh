#!/usr/bin/env bash
# Runs a program with the Sluice verbs device visible to libibverbs 44.0: the prototype of
# what `sluice run` will set up (issue 16, item 3). No kernel RDMA is needed.
#   with-device.sh PROVIDER_DIR PROGRAM [ARGS...]
# PROVIDER_DIR holds libsluice-rdmav34.so. The script
#  - writes a fake sysfs tree (mkfake-sysfs.sh) and points SYSFS_PATH at it;
#  - enters a private mount namespace (a user namespace too when not root) whose /dev is a
#    tmpfs holding bind mounts of the real /dev entries plus /dev/infiniband/sluice_uverbs0
#    -> /dev/full, because libibverbs stat()s and open()s that path under the fixed
#    RDMA_CDEV_DIR "/dev/infiniband", which SYSFS_PATH does not move (init.c:87-100,
#    device.c:330-339); the host's /dev is not changed. /dev/full, not /dev/null: the few
#    verbs libibverbs sends to the kernel itself (ibv_create_comp_channel, verbs.c:498-520)
#    then fail with ENOSPC, where /dev/null would "succeed" with an unfilled response;
#  - sets RDMAV_DRIVERS to the provider's path WITHOUT the "-rdmav34.so" suffix, which
#    libibverbs appends itself (dynamic_driver.c:170-177).
set -euo pipefail
dir=$(cd "${1:?usage: with-device.sh PROVIDER_DIR PROGRAM [ARGS...]}" && pwd)
shift
[ $# -gt 0 ] || { echo "with-device.sh: no program given" >&2; exit 2; }
[ -f "$dir/libsluice-rdmav34.so" ] || { echo "with-device.sh: $dir/libsluice-rdmav34.so missing" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
state=$(mktemp -d /tmp/sluice-verbs.XXXXXX)
trap 'rm -rf "$state"' EXIT
"$here/mkfake-sysfs.sh" "$state/sys"
mkdir "$state/old"
export SYSFS_PATH="$state/sys" RDMAV_DRIVERS="$dir/libsluice"
ns=(unshare --mount --propagation private)
[ "$(id -u)" -eq 0 ] || ns=(unshare --user --map-root-user --mount --propagation private)
# The inner script: keep a handle on the real /dev, cover /dev with a tmpfs, bind every
# real entry back (symlinks copied), add the verbs node, drop the handle, run the program.
"${ns[@]}" bash -c '
set -euo pipefail
old=$1; shift
mount --rbind /dev "$old"
mount -t tmpfs -o mode=755,size=64k sluice-dev /dev
shopt -s dotglob nullglob
bind_entries() { # FROM TO: recreate the entries of FROM in TO, a directory on our tmpfs
  local e n
  for e in "$1"/*; do
    n=${e##*/}
    if [ -L "$e" ]; then cp -P "$e" "$2/$n"
    elif [ "$e" = "$old/infiniband" ]; then mkdir "$2/$n"; bind_entries "$e" "$2/$n"
    elif [ -d "$e" ]; then mkdir "$2/$n"; mount --rbind "$e" "$2/$n"
    else : > "$2/$n"; mount --bind "$e" "$2/$n"; fi
  done
}
# A real /dev/infiniband (an RDMA host) is rebuilt entry by entry, never written through.
bind_entries "$old" /dev
mkdir -p /dev/infiniband
[ -e /dev/infiniband/sluice_uverbs0 ] || ln -s /dev/full /dev/infiniband/sluice_uverbs0
umount -l "$old"
exec "$@"' with-device "$state/old" "$@"
