#!/usr/bin/env bash
# Builds the VM lane's Debian 12 image, once per recipe: a raw ext4 root filesystem with systemd,
# a lingering normal user and the lane's boot unit, plus the kernel and initrd to boot it with
# -kernel/-initrd. Output: $REAPER_CI_CACHE/vm/<recipe key>/{root.img,vmlinuz,initrd.img}
# (default ~/.cache/reaper-ci). A second run with the same recipe is a no-op; --force rebuilds.
# Needs root (mmdebstrap's root mode), mmdebstrap and e2fsprogs (ci/vm/install-deps.sh).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"

out=$(vm_image_dir)
up_to_date() { [ -f "$out/root.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; }
if [ "${1:-}" != --force ] && up_to_date; then
  echo "vm image up to date: $out"
  exit 0
fi
mkdir -p "$vm_cache"
# One build at a time per cache (two checkouts may share it); the second finds the image built.
exec 9>"$vm_cache/build.lock"
flock 9
if [ "${1:-}" != --force ] && up_to_date; then
  echo "vm image up to date: $out"
  exit 0
fi
for tool in mmdebstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || { echo "build-image.sh: $tool is missing; run ci/vm/install-deps.sh" >&2; exit 1; }
done

mirror=${REAPER_VM_MIRROR:-http://deb.debian.org/debian}
start=$(date +%s)
rm -rf "$vm_cache"/tmp.*   # under the lock, any is a killed build's leftover
work=$(mktemp -d "$vm_cache/tmp.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root

packages=(
  systemd systemd-sysv dbus dbus-user-session libpam-systemd  # a systemd host with user managers
  linux-image-amd64                                           # kernel + initrd, extracted below
  passwd util-linux procps psmisc python3 kmod                # what scenarios use
  podman crun netavark catatonit tini busybox-static          # scenarios/podman.sh: the engine, inits, the app's shell
)

echo "building the vm image in $work (mmdebstrap bookworm from $mirror)"
# No recommends, no docs, man pages or translations: the image stays small and the build fast.
# The initrd holds only what finds the root disk (virtio, ext4): with MODULES=most (the default)
# the initramfs took 13 of the 35 s to the payload under TCG. The journal stays in memory.
mmdebstrap --mode=root --variant=apt --include="$(IFS=,; echo "${packages[*]}")" \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook='echo reaper-vm > "$1/etc/hostname"' \
  --customize-hook='chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash tester' \
  --customize-hook='mkdir -p "$1/var/lib/systemd/linger" && touch "$1/var/lib/systemd/linger/tester"' \
  --customize-hook="install -m 0755 '$vm_dir/image/reaper-vm-run' \"\$1/usr/local/sbin/reaper-vm-run\"" \
  --customize-hook="install -m 0644 '$vm_dir/image/reaper-vm.service' \"\$1/etc/systemd/system/reaper-vm.service\"" \
  --customize-hook='chroot "$1" systemctl enable reaper-vm.service' \
  --customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer getty@tty1.service serial-getty@ttyS0.service serial-getty@ttyS1.service' \
  --customize-hook='passwd --root "$1" --delete root' \
  --customize-hook='mkdir -p "$1/etc/systemd/journald.conf.d" && printf "[Journal]\nStorage=volatile\n" > "$1/etc/systemd/journald.conf.d/volatile.conf"' \
  --customize-hook='echo MODULES=list > "$1/etc/initramfs-tools/conf.d/reaper-vm" && printf "virtio_pci\nvirtio_blk\next4\n" >> "$1/etc/initramfs-tools/modules" && chroot "$1" update-initramfs -u' \
  bookworm "$root" "$mirror" 2>&1 | tail -n 20

# Kernel and initrd out of the tree; then drop what a virtio guest never loads.
kver=$(basename "$(ls -d "$root"/lib/modules/*)")
cp "$root/boot/vmlinuz-$kver" "$work/vmlinuz"
cp "$root/boot/initrd.img-$kver" "$work/initrd.img"
rm -rf "${root:?}/boot/"* "$root/var/cache/apt/"*.bin "$root/var/lib/apt/lists/"*
mods=$root/lib/modules/$kver/kernel
rm -rf "$mods/sound" "$mods/drivers/gpu" "$mods/drivers/media" "$mods/drivers/net/wireless" \
  "$mods/drivers/net/ethernet" "$mods/drivers/infiniband" "$mods/drivers/staging" \
  "$mods/drivers/iio" "$mods/drivers/bluetooth" "$mods/net/bluetooth" "$mods/drivers/isdn" \
  "$mods/drivers/usb" "$mods/drivers/hid" "$mods/drivers/input" "$mods/drivers/scsi" \
  "$mods/drivers/net/can" "$mods/net/wireless" "$mods/net/mac80211"
chroot "$root" depmod -a "$kver"

# An ext4 image populated from the tree (no loop mount needed), sparse, with room for the tests.
used_mb=$(du -sm "$root" | cut -f1)
size_mb=$((used_mb * 13 / 10 + 1024))
truncate -s "${size_mb}M" "$work/root.img"
mkfs.ext4 -q -F -L reaper-root -d "$root" "$work/root.img"

rm -rf "$out"
mkdir -p "$out"
mv "$work/root.img" "$work/vmlinuz" "$work/initrd.img" "$out/"
# Other recipes' images (other branches and checkouts share the cache) go once unused for a week
# (run.sh touches last-used at each boot).
find "$vm_cache" -mindepth 2 -maxdepth 2 -name last-used -mtime +7 -printf '%h\n' |
  while read -r stale; do [ "$stale" = "$out" ] || rm -rf "$stale"; done
touch "$out/last-used"
echo "vm image built in $(( $(date +%s) - start )) s: $out (kernel $kver, tree ${used_mb} MB, root.img $(du -m "$out/root.img" | cut -f1) MB used of ${size_mb} MB)"
