package disk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// btrfs ioctls (linux/btrfs.h), called directly: a sandbox's create and
// delete then cost microseconds rather than a btrfs-progs process each.
const (
	btrfsSuperMagic = 0x9123683e
	// btrfsFirstFreeObjectID is the inode number of every subvolume's root
	// directory.
	btrfsFirstFreeObjectID = 256

	btrfsIocSubvolCreate = 0x5000940e // _IOW(0x94, 14, struct btrfs_ioctl_vol_args)
	btrfsIocSnapDestroy  = 0x5000940f // _IOW(0x94, 15, struct btrfs_ioctl_vol_args)
	btrfsIocQuotaCtl     = 0xc0109428 // _IOWR(0x94, 40, struct btrfs_ioctl_quota_ctl_args)
	btrfsIocQgroupLimit  = 0x8030942b // _IOR(0x94, 43, struct btrfs_ioctl_qgroup_limit_args)
	btrfsIocSnapCreateV2 = 0x50009417 // _IOW(0x94, 23, struct btrfs_ioctl_vol_args_v2)

	// btrfsSubvolRdonly makes a snapshot read-only (BTRFS_SUBVOL_RDONLY).
	btrfsSubvolRdonly = 1 << 1

	btrfsQuotaCtlEnable     = 1
	btrfsQgroupLimitMaxRfer = 1 << 0
	// btrfsLimitClear as a limit removes it.
	btrfsLimitClear = ^uint64(0)
)

// btrfsVolArgs is struct btrfs_ioctl_vol_args.
type btrfsVolArgs struct {
	fd   int64
	name [4088]byte
}

// btrfsVolArgsV2 is struct btrfs_ioctl_vol_args_v2 (4096 bytes): the
// source subvolume's fd, flags, and the new snapshot's name.
type btrfsVolArgsV2 struct {
	fd      int64
	transid uint64
	flags   uint64
	unused  [4]uint64
	name    [4040]byte
}

// btrfsQuotaCtlArgs is struct btrfs_ioctl_quota_ctl_args.
type btrfsQuotaCtlArgs struct {
	cmd, status uint64
}

// btrfsQgroupLimitArgs is struct btrfs_ioctl_qgroup_limit_args.
type btrfsQgroupLimitArgs struct {
	qgroupid                                  uint64
	flags, maxRfer, maxExcl, rsvRfer, rsvExcl uint64
}

func ioctlPtr(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

// isBtrfs reports whether p is on a btrfs filesystem.
func isBtrfs(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && uint32(st.Type) == btrfsSuperMagic
}

// isSubvolume reports whether p is the root of a btrfs subvolume (not
// following a final symlink).
func isSubvolume(p string) bool {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false
	}
	return st.Ino == btrfsFirstFreeObjectID && isBtrfs(p)
}

// volArgs opens p's parent directory and returns it with the ioctl
// arguments that name p's last element in it.
func volArgs(p string) (*os.File, *btrfsVolArgs, error) {
	name := filepath.Base(p)
	if len(name) >= 4088 || name == "." || name == "/" {
		return nil, nil, fmt.Errorf("subvolume name %q", name)
	}
	parent, err := os.OpenFile(filepath.Dir(p), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, err
	}
	var a btrfsVolArgs
	copy(a.name[:], name)
	return parent, &a, nil
}

// createSubvolume makes an empty btrfs subvolume at p.
func createSubvolume(p string) error {
	parent, a, err := volArgs(p)
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := ioctlPtr(int(parent.Fd()), btrfsIocSubvolCreate, unsafe.Pointer(a)); err != nil {
		return fmt.Errorf("create subvolume %s: %w", p, err)
	}
	return nil
}

// snapshotSubvolume makes dst a snapshot of the subvolume src (both on one
// btrfs), read-only when readonly. It takes milliseconds whatever the
// size: the snapshot shares every extent with src until one side writes.
// Data written to src before the call is in the snapshot (btrfs flushes
// src's dirty pages first); a write racing the call may or may not be.
// Neither path's last element is followed if it is a symlink.
func snapshotSubvolume(src, dst string, readonly bool) error {
	name := filepath.Base(dst)
	if len(name) >= 4040 || name == "." || name == "/" {
		return fmt.Errorf("snapshot name %q", name)
	}
	sf, err := os.OpenFile(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer sf.Close()
	parent, err := os.OpenFile(filepath.Dir(dst), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer parent.Close()
	a := btrfsVolArgsV2{fd: int64(sf.Fd())}
	if readonly {
		a.flags = btrfsSubvolRdonly
	}
	copy(a.name[:], name)
	if err := ioctlPtr(int(parent.Fd()), btrfsIocSnapCreateV2, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("snapshot %s to %s: %w", src, dst, err)
	}
	return nil
}

// deleteSubvolume deletes the subvolume at p with everything in it; the
// space is freed in the background by btrfs.
func deleteSubvolume(p string) error {
	parent, a, err := volArgs(p)
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := ioctlPtr(int(parent.Fd()), btrfsIocSnapDestroy, unsafe.Pointer(a)); err != nil {
		return fmt.Errorf("delete subvolume %s: %w", p, err)
	}
	return nil
}

// enableQuota turns btrfs quotas (qgroups) on for the filesystem at mnt;
// already on is fine.
func enableQuota(mnt string) error {
	f, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer f.Close()
	a := btrfsQuotaCtlArgs{cmd: btrfsQuotaCtlEnable}
	if err := ioctlPtr(int(f.Fd()), btrfsIocQuotaCtl, unsafe.Pointer(&a)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("enable btrfs quota on %s: %w", mnt, err)
	}
	return nil
}

// limitSubvolume sets the referenced-bytes limit of the subvolume at p (its
// own qgroup, 0/<subvolume id>); 0 removes the limit. p must be the root
// of a subvolume: on any other directory the ioctl would limit the
// subvolume that contains it.
func limitSubvolume(p string, bytes int64) error {
	if !isSubvolume(p) {
		return fmt.Errorf("limit %s: not a btrfs subvolume", p)
	}
	f, err := os.OpenFile(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	a := btrfsQgroupLimitArgs{flags: btrfsQgroupLimitMaxRfer, maxRfer: btrfsLimitClear}
	if bytes > 0 {
		a.maxRfer = uint64(bytes)
	}
	if err := ioctlPtr(int(f.Fd()), btrfsIocQgroupLimit, unsafe.Pointer(&a)); err != nil {
		return fmt.Errorf("limit subvolume %s: %w", p, err)
	}
	return nil
}
