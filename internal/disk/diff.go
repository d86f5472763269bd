package disk

import (
	"path/filepath"
	"slices"
	"sort"

	"golang.org/x/sys/unix"
)

// Change is one path that differs between two disks, as the sandbox sees
// them (the writable layer over the image).
type Change struct {
	Path string `json:"path"`
	// Type of the path on the newer disk, or on the older one if deleted;
	// OldType is set when a modification changed the type.
	Type    EntryType `json:"type"`
	OldType EntryType `json:"old_type,omitempty"`
	// Size on the newer disk (0 if deleted) and on the older one (0 if
	// added), in bytes.
	Size    int64 `json:"size"`
	OldSize int64 `json:"old_size"`
	// LinkTarget is a symlink's target (the newer one).
	LinkTarget string `json:"link_target,omitempty"`
}

// DiffResult lists what changed from one disk to another.
type DiffResult struct {
	Added    []Change `json:"added"`
	Modified []Change `json:"modified"`
	Deleted  []Change `json:"deleted"`
}

// view is what a path looks like through the overlay: an upper entry, a
// lower (image) file, or nothing.
type view struct {
	e     *Entry // nil: from the image, or absent
	lower *unix.Stat_t
}

// meta is a view's mode and owner.
func (v view) meta() (mode uint32, uid, gid int) {
	if v.e != nil {
		return v.e.Mode, v.e.UID, v.e.GID
	}
	return v.lower.Mode & 0o7777, int(v.lower.Uid), int(v.lower.Gid)
}

func (v view) target() string {
	if v.e != nil {
		return v.e.Target
	}
	return ""
}

func (v view) exists() bool { return v.e != nil || v.lower != nil }

func (v view) typ() EntryType {
	if v.e != nil {
		return v.e.Type
	}
	switch v.lower.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFREG:
		return TypeFile
	}
	return TypeChar
}

func (v view) size() int64 {
	if v.e != nil {
		return v.e.Size
	}
	if v.lower != nil && v.lower.Mode&unix.S_IFMT == unix.S_IFREG {
		return v.lower.Size
	}
	return 0
}

// Diff compares the disks of two manifests of layers over the same image
// (lower, the image's root filesystem): a path is added, modified (content,
// type, mode, owner or link target; a directory's own times do not count)
// or deleted in the sandbox's view. Paths under an added or deleted
// directory are listed too. Entries are sorted by path. The image is read
// beneath its root's fd without following links (an image may hold any
// symlink); an unreadable image shows as empty.
func Diff(from, to *Manifest, lower string) *DiffResult {
	lfd, err := openRoot(lower)
	if err != nil {
		lfd = -1
	} else {
		defer unix.Close(lfd)
	}
	a := index(from)
	b := index(to)
	// A hard link shows as the file it shares.
	for _, m := range []map[string]*Entry{a, b} {
		for p, e := range m {
			if e.Type == TypeHardlink {
				if t, ok := m[e.Target]; ok {
					cp := *t
					cp.Path = p
					m[p] = &cp
				}
			}
		}
	}
	paths := map[string]bool{}
	for p := range a {
		paths[p] = true
	}
	for p := range b {
		paths[p] = true
	}
	// A directory made opaque, or deleted by a whiteout, hides the image's
	// tree below it: list those lower paths too.
	for _, m := range []map[string]*Entry{a, b} {
		for p, e := range m {
			if (e.Type == TypeDir && isOpaque(e)) || e.Type == TypeWhiteout {
				addLowerTree(lfd, p, paths)
			}
		}
	}
	res := &DiffResult{Added: []Change{}, Modified: []Change{}, Deleted: []Change{}}
	for p := range paths {
		if p == "" {
			continue
		}
		va, vb := resolve(a, lfd, p), resolve(b, lfd, p)
		switch {
		case !va.exists() && vb.exists():
			res.Added = append(res.Added, Change{Path: "/" + p, Type: vb.typ(), Size: vb.size(), LinkTarget: vb.target()})
		case va.exists() && !vb.exists():
			res.Deleted = append(res.Deleted, Change{Path: "/" + p, Type: va.typ(), OldSize: va.size(), LinkTarget: va.target()})
		case va.exists() && vb.exists() && changed(va, vb):
			c := Change{Path: "/" + p, Type: vb.typ(), Size: vb.size(), OldSize: va.size(), LinkTarget: vb.target()}
			if va.typ() != vb.typ() {
				c.OldType = va.typ()
			}
			res.Modified = append(res.Modified, c)
		}
	}
	for _, l := range []*[]Change{&res.Added, &res.Modified, &res.Deleted} {
		sort.Slice(*l, func(i, j int) bool { return (*l)[i].Path < (*l)[j].Path })
	}
	return res
}

func index(m *Manifest) map[string]*Entry {
	out := make(map[string]*Entry, len(m.Entries))
	for i := range m.Entries {
		out[m.Entries[i].Path] = &m.Entries[i]
	}
	return out
}

func isOpaque(e *Entry) bool { return string(e.Xattrs["trusted.overlay.opaque"]) == "y" }

// resolve is how p looks in the sandbox with upper entries m over the
// image open as lfd.
func resolve(m map[string]*Entry, lfd int, p string) view {
	if e, ok := m[p]; ok {
		if e.Type == TypeWhiteout {
			return view{}
		}
		return view{e: e}
	}
	// Not in the upper layer: the image's file shows, unless a parent is
	// deleted (whiteout), replaced by a non-directory, or opaque.
	for parent := filepath.Dir(p); parent != "." && parent != "/"; parent = filepath.Dir(parent) {
		if e, ok := m[parent]; ok && (e.Type != TypeDir || isOpaque(e)) {
			return view{}
		}
	}
	if lfd < 0 {
		return view{}
	}
	parent, name := splitParent(p)
	pfd, err := openBeneath(lfd, parent, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return view{}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return view{}
	}
	return view{lower: &st}
}

// changed reports whether a path differs between two views: type, mode,
// owner, link target, device, or content (a directory's own times do not
// count: they move with every entry made in it).
func changed(a, b view) bool {
	if a.typ() != b.typ() {
		return true
	}
	if a.e == nil && b.e == nil {
		return false // both the image's
	}
	am, au, ag := a.meta()
	bm, bu, bg := b.meta()
	if am != bm || au != bu || ag != bg {
		return true
	}
	if a.e == nil || b.e == nil {
		// One side is the image's file, the other a copy-up: a copied-up
		// directory with the image's mode and owner changed nothing visible;
		// any other copy-up was opened for writing.
		return a.typ() != TypeDir
	}
	ea, eb := a.e, b.e
	if ea.Target != eb.Target || ea.Rdev != eb.Rdev {
		return true
	}
	if ea.Type != TypeFile {
		return false
	}
	if ea.Size != eb.Size {
		return true
	}
	if ea.Sum != "" && eb.Sum != "" {
		return ea.Sum != eb.Sum
	}
	return !slices.Equal(ea.Extents, eb.Extents)
}

// addLowerTree adds the image's paths under dir (relative) to paths,
// walking beneath the image's root fd lfd without following links.
func addLowerTree(lfd int, dir string, paths map[string]bool) {
	if lfd < 0 {
		return
	}
	fd, err := openBeneath(lfd, dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	addLowerDir(fd, dir, 1, paths)
}

func addLowerDir(fd int, rel string, depth int, paths map[string]bool) {
	names, err := readNames(fd)
	if err != nil {
		return
	}
	for _, name := range names {
		crel := rel + "/" + name
		if rel == "" {
			crel = name
		}
		paths[crel] = true
		if depth >= maxDepth {
			continue
		}
		cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|openFlags, 0)
		if err != nil {
			continue // not a directory
		}
		addLowerDir(cfd, crel, depth+1, paths)
		unix.Close(cfd)
	}
}
