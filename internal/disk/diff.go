package disk

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
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
	lower os.FileInfo
}

// meta is a view's mode and owner.
func (v view) meta() (mode uint32, uid, gid int) {
	if v.e != nil {
		return v.e.Mode, v.e.UID, v.e.GID
	}
	st, ok := v.lower.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, -1, -1
	}
	return st.Mode & 0o7777, int(st.Uid), int(st.Gid)
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
	switch m := v.lower.Mode(); {
	case m.IsDir():
		return TypeDir
	case m&os.ModeSymlink != 0:
		return TypeSymlink
	case m.IsRegular():
		return TypeFile
	}
	return TypeChar
}

func (v view) size() int64 {
	if v.e != nil {
		return v.e.Size
	}
	if v.lower != nil && v.lower.Mode().IsRegular() {
		return v.lower.Size()
	}
	return 0
}

// Diff compares the disks of two manifests of layers over the same image
// (lower, the image's root filesystem): a path is added, modified (content,
// type, mode, owner or link target; a directory's own times do not count)
// or deleted in the sandbox's view. Paths under an added or deleted
// directory are listed too. Entries are sorted by path.
func Diff(from, to *Manifest, lower string) *DiffResult {
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
				addLowerTree(lower, p, paths)
			}
		}
	}
	res := &DiffResult{Added: []Change{}, Modified: []Change{}, Deleted: []Change{}}
	for p := range paths {
		if p == "" {
			continue
		}
		va, vb := resolve(a, lower, p), resolve(b, lower, p)
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

// resolve is how p looks in the sandbox with upper entries m over lower.
func resolve(m map[string]*Entry, lower, p string) view {
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
	fi, err := os.Lstat(filepath.Join(lower, p))
	if err != nil {
		return view{}
	}
	return view{lower: fi}
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

// addLowerTree adds the image's paths under dir (relative) to paths.
func addLowerTree(lower, dir string, paths map[string]bool) {
	root := filepath.Join(lower, dir)
	_ = filepath.Walk(root, func(path string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(path, lower), "/")
		if rel != "" {
			paths[rel] = true
		}
		return nil
	})
}
