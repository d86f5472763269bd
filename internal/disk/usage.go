package disk

import (
	"io/fs"
	"path/filepath"
)

// Usage returns the bytes of the files of sandbox id's writable layer (the
// sizes of its regular files, holes counted), walking without following
// symlinks; a missing layer is 0.
func (l *Layers) Usage(id string) int64 {
	var n int64
	_ = filepath.WalkDir(l.base(id), func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}
