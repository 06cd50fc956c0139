#!/usr/bin/env bash
# Writes the fake sysfs tree libibverbs 44.0 scans when the kernel has no RDMA netlink
# (init.c:204-238 find_sysfs_devs, 153-202 setup_sysfs_dev; sysfs.c:48-76 SYSFS_PATH).
# Usage: mkfake-sysfs.sh ROOT [IBDEV] [UVERBS]; then SYSFS_PATH=ROOT.
set -euo pipefail
root=${1:?usage: mkfake-sysfs.sh ROOT [IBDEV] [UVERBS]}
ibdev=${2:-sluice0}
uverbs=${3:-sluice_uverbs0}
v=$root/class/infiniband_verbs
d=$root/class/infiniband/$ibdev
mkdir -p "$v/$uverbs" "$d/device" "$d/ports/1/gids" "$d/ports/1/gid_attrs/types"
# Checked against IB_USER_VERBS_MIN/MAX_ABI_VERSION (3..6) by check_abi_version (init.c:467-491).
echo 6 > "$v/abi_version"
echo "$ibdev" > "$v/$uverbs/ibdev"
# "0:0" makes the cdev number 0, so open_cdev (util/open_cdev.c:134-146) accepts any
# character device at /dev/infiniband/$uverbs and never waits for udev.
echo 0:0 > "$v/$uverbs/dev"
# Compared with the provider's match_min/max_abi_version (init.c:363-372).
echo 1 > "$v/$uverbs/abi_version"
echo "1: CA" > "$d/node_type"
echo 5c1c:e000:0000:0001 > "$d/node_guid"
echo SLUICE-POC > "$d/board_id"
# Matched by the provider's VERBS_MATCH_MODALIAS entry "sluice:*" (init.c:277-298).
echo sluice:engine > "$d/device/modalias"
# GID 0: the IPv4-mapped address (10.0.0.1) as RoCEv2 uses it; read by libibverbs'
# sysfs fallback for ibv_query_gid (cmd_device.c:238-263, 322-374).
echo 0000:0000:0000:0000:0000:ffff:0a00:0001 > "$d/ports/1/gids/0"
echo "RoCE v2" > "$d/ports/1/gid_attrs/types/0"
