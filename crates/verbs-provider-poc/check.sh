#!/usr/bin/env bash
# Builds the proof-of-concept provider with cc and shows, with no kernel RDMA, that
# unmodified ibverbs-utils programs list and open the Sluice verbs device through it.
# Exit 0: proven; 1: a check failed; 77: skipped (a prerequisite is missing).
# Not wired into .ci/run yet (docs/notes/issue-16/provider.md).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
command -v cc >/dev/null || skip "no C compiler"
[ -f /usr/include/infiniband/verbs.h ] || skip "libibverbs-dev is not installed"
command -v ibv_devices >/dev/null && command -v ibv_devinfo >/dev/null || skip "ibverbs-utils is not installed"
command -v unshare >/dev/null || skip "unshare (util-linux) is missing"
out=$(mktemp -d /tmp/sluice-verbs-poc.XXXXXX)
trap 'rm -rf "$out"' EXIT
cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$out/libsluice-rdmav34.so" \
  "$here/provider.c" -libverbs || fail "the provider does not build"
unshare --mount true 2>/dev/null || unshare --user --map-root-user --mount true 2>/dev/null \
  || skip "cannot create a mount namespace here"

# 1. ibv_devices lists sluice0 with the node GUID of the fake sysfs tree.
devices=$("$here/with-device.sh" "$out" ibv_devices 2>&1) || fail "ibv_devices exited $?: $devices"
echo "\$ ibv_devices"; echo "$devices"
grep -Eq '^[[:space:]]*sluice0[[:space:]]+5c1ce00000000001$' <<<"$devices" \
  || fail "ibv_devices does not list sluice0"

# The same tree without our provider: libibverbs finds the sysfs entry, no driver claims it.
bare=$("$here/with-device.sh" "$out" env -u RDMAV_DRIVERS ibv_devices 2>&1) || true
grep -q sluice0 <<<"$bare" && fail "sluice0 is listed without the provider: the test proves nothing"

# 2. ibv_devinfo opens the device and prints what query_device_ex/query_port return.
info=$("$here/with-device.sh" "$out" ibv_devinfo -v -d sluice0 2>&1) || fail "ibv_devinfo exited $?: $info"
echo "\$ ibv_devinfo -v -d sluice0 (excerpt)"
grep -E 'hca_id|fw_ver|node_guid|vendor|board_id|phys_port_cnt|max_qp:|state|mtu|link_layer|GID' <<<"$info"
for want in $'hca_id:\tsluice0' 'fw_ver:[[:space:]]+sluice-poc-0.1' 'node_guid:[[:space:]]+5c1c:e000:0000:0001' \
  'vendor_id:[[:space:]]+0x5c1c' 'vendor_part_id:[[:space:]]+4791' 'board_id:[[:space:]]+SLUICE-POC' \
  'max_qp:[[:space:]]+1024' 'state:[[:space:]]+PORT_ACTIVE \(4\)' 'max_mtu:[[:space:]]+4096 \(5\)' \
  'active_mtu:[[:space:]]+1024 \(3\)' 'link_layer:[[:space:]]+Ethernet' \
  'GID\[  0\]:[[:space:]]+::ffff:10.0.0.1, RoCE v2'; do
  grep -Eq "$want" <<<"$info" || fail "ibv_devinfo lacks /$want/"
done

# 3. A verb libibverbs sends to the kernel itself fails cleanly (cmd_fd is /dev/full).
cc -O2 -Wall -Wextra -Werror -o "$out/comp_channel" "$here/probes/comp_channel.c" -libverbs \
  || fail "probes/comp_channel.c does not build"
chan=$("$here/with-device.sh" "$out" "$out/comp_channel" 2>&1) || fail "comp_channel: $chan"
echo "$chan"
grep -q 'ibv_create_comp_channel: No space left on device' <<<"$chan" \
  || fail "ibv_create_comp_channel did not fail with ENOSPC"

# 4. The LD_PRELOAD route: versioned references from ibv_devices reach a preloaded library.
cc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$out/preload.so" "$here/probes/preload.c" \
  -Wl,--version-script="$here/probes/preload.map" || fail "probes/preload.c does not build"
pre=$(LD_PRELOAD="$out/preload.so" ibv_devices 2>&1) || fail "ibv_devices under LD_PRELOAD exited $?: $pre"
echo "\$ LD_PRELOAD=preload.so ibv_devices"; echo "$pre"
grep -Eq '^[[:space:]]*sluice-preload0[[:space:]]+5c1ce000000000ff$' <<<"$pre" \
  || fail "the preloaded ibv_get_device_list@IBVERBS_1.1 was not called"
echo "OK: libibverbs 44.0 lists and opens sluice0 through libsluice-rdmav34.so, no kernel RDMA"
