package engine

import (
	"path/filepath"
	"strings"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/internal/errdefs"
)

// MaxVolumes is the most volumes one sandbox may attach.
const MaxVolumes = 16

func (e *Engine) volumeDir(name string) string {
	return e.layers.VolumePath(name, filepath.Join(e.volumesDir, name))
}

// sbxMounts are the files sbx mounts in every sandbox (see spec): a volume
// may not be at one of them or at a directory above one.
var sbxMounts = []string{"/.sbx/bin", "/.sbx/run", "/etc/resolv.conf", "/etc/hostname"}

// validateVolumes checks volume names and mount paths: names like sandbox
// names, absolute clean paths outside sbx's reserved paths, each path once.
func (e *Engine) validateVolumes(vols []api.Volume) error {
	if len(vols) > MaxVolumes {
		return errdefs.Invalid("volumes", "%d volumes, at most %d", len(vols), MaxVolumes)
	}
	seen := map[string]bool{}
	for i, v := range vols {
		if err := ValidateName("volumes", v.Name); err != nil {
			return err
		}
		p, err := CleanPath("volumes", v.Path)
		if err != nil {
			return err
		}
		if p == "/" || underReserved(p) {
			return errdefs.Invalid("volumes", "volume %d: cannot mount at %s", i, p)
		}
		for _, m := range sbxMounts {
			if m == p || strings.HasPrefix(m, p+"/") {
				return errdefs.Invalid("volumes", "volume %d: cannot mount at %s: sbx mounts %s", i, p, m)
			}
		}
		if seen[p] {
			return errdefs.Invalid("volumes", "two volumes at %s", p)
		}
		seen[p] = true
		vols[i].Path = p
	}
	return nil
}

// makeVolumes creates the host directories of vols.
func (e *Engine) makeVolumes(vols []api.Volume) error {
	for _, v := range vols {
		// A volume gets the default disk quota of a sandbox (btrfs layers).
		if err := e.layers.MakeVolume(v.Name, filepath.Join(e.volumesDir, v.Name), e.cfg.DefaultDiskMB); err != nil {
			return err
		}
	}
	return nil
}
