package cli

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/client"
)

// splitRemote splits "NAME:/path" into its parts; ok is false for a local
// path (one with no colon before its first slash).
func splitRemote(s string) (name, path string, ok bool) {
	i := strings.Index(s, ":")
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func (a *app) cpCmd() *cobra.Command {
	var maxBytes int64
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between the host and a sandbox",
		Long: "Copy files between the host and a sandbox. One side is NAME:/abs/path.\n" +
			"A directory is copied with its contents into DST (created if missing);\n" +
			"a file is copied to DST, or into DST when DST is an existing directory or ends with /.\n" +
			"Sparse files stay sparse. A copy out of a sandbox of more than --max-bytes\n" +
			"(file data; holes are not counted) is refused before anything is written.",
		Example: "  sbx cp ./project dev:/workspace/project\n  sbx cp dev:/workspace/report.txt .",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcName, srcPath, srcRemote := splitRemote(args[0])
			dstName, dstPath, dstRemote := splitRemote(args[1])
			switch {
			case srcRemote == dstRemote:
				return errors.New("exactly one of SRC and DST must be NAME:/path")
			case dstRemote:
				sb, err := a.c.Sandboxes.Get(cmd.Context(), dstName)
				if err != nil {
					return err
				}
				return a.upload(cmd, sb, args[0], dstPath)
			default:
				sb, err := a.c.Sandboxes.Get(cmd.Context(), srcName)
				if err != nil {
					return err
				}
				return a.download(cmd, sb, srcPath, args[1], maxBytes)
			}
		},
	}
	cmd.Flags().Int64Var(&maxBytes, "max-bytes", defaultCpMaxBytes, "refuse a copy out of a sandbox larger than this many bytes")
	return cmd
}

func (a *app) upload(cmd *cobra.Command, sb *client.Sandbox, local, remote string) error {
	fi, err := os.Stat(local)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		if strings.HasSuffix(remote, "/") {
			remote += filepath.Base(local)
		} else if _, err := sb.ListFiles(cmd.Context(), remote); err == nil {
			remote += "/" + filepath.Base(local) // an existing directory
		}
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		return sb.WriteFile(cmd.Context(), remote, f, unixMode(fi.Mode()))
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(local, pw)) }()
	return sb.Upload(cmd.Context(), remote, pr)
}

// unixMode gives m's permission bits with its setuid, setgid and sticky
// bits as the API's mode wants them (0o4000, 0o2000, 0o1000; Go's FileMode
// keeps them elsewhere, so Perm() drops them).
func unixMode(m fs.FileMode) uint32 {
	mode := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// tarDir writes dir's contents as a tar with names relative to dir.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil // sockets and devices are skipped
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = filepath.ToSlash(rel)
		hdr.Format = tar.FormatPAX // keeps sub-second mtimes
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.CopyN(tw, f, hdr.Size)
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// defaultCpMaxBytes is sbx cp's --max-bytes: what a copy out of a sandbox
// may transfer (file data, holes of sparse files not counted).
const defaultCpMaxBytes = 1 << 30

// download copies remote (a file, or a directory's contents) to local
// through an archive, so that sparse files stay sparse: the holes are not
// sent, and are not written here.
func (a *app) download(cmd *cobra.Command, sb *client.Sandbox, remote, local string, maxBytes int64) error {
	ar, err := sb.DownloadMax(cmd.Context(), remote, maxBytes)
	if err != nil {
		if errors.Is(err, client.ErrTooLarge) {
			return fmt.Errorf("%w\nsbx cp copies at most --max-bytes=%d bytes out of a sandbox; pass a larger --max-bytes to copy it", err, maxBytes)
		}
		return err
	}
	defer ar.Close()
	switch ar.Type {
	case "dir":
		return client.ExtractArchive(ar, local)
	case "file":
	case "symlink":
		// Copy what the link points to, as a file read does.
		ar.Close()
		return a.downloadFile(cmd, sb, remote, local, maxBytes)
	default:
		return fmt.Errorf("%s is not a regular file or a directory", remote)
	}
	tr := tar.NewReader(ar)
	hdr, err := tr.Next()
	if err != nil {
		return fmt.Errorf("copy %s: %w", remote, err)
	}
	if hdr.Typeflag != tar.TypeReg {
		return fmt.Errorf("copy %s: the archive holds a %q entry, not a file", remote, hdr.Typeflag)
	}
	return writeLocal(remote, local, fs.FileMode(hdr.Mode)&fs.ModePerm, tr)
}

// downloadFile copies the file remote (through symlinks) with a files
// read.
func (a *app) downloadFile(cmd *cobra.Command, sb *client.Sandbox, remote, local string, maxBytes int64) error {
	rf, err := sb.OpenFileMax(cmd.Context(), remote, maxBytes)
	if err != nil {
		if errors.Is(err, client.ErrTooLarge) {
			return fmt.Errorf("%w\nsbx cp copies at most --max-bytes=%d bytes out of a sandbox; pass a larger --max-bytes to copy it", err, maxBytes)
		}
		return err
	}
	defer rf.Close()
	return writeLocal(remote, local, fs.FileMode(rf.Mode)&fs.ModePerm, rf)
}

// writeLocal writes r to local (or into it, when it is a directory or
// ends with /) through a temp file renamed into place, runs of zeros left
// as holes.
func writeLocal(remote, local string, mode fs.FileMode, r io.Reader) error {
	if fi, err := os.Stat(local); (err == nil && fi.IsDir()) || strings.HasSuffix(local, "/") {
		local = filepath.Join(local, path.Base(remote))
	}
	if mode == 0 {
		mode = 0o644
	}
	// Write a temp file beside the destination and rename it over: a
	// symlink at the destination (say, one an earlier copy brought from
	// the sandbox) is replaced, never written through.
	f, err := os.CreateTemp(filepath.Dir(local), ".sbx-cp-*")
	if err != nil {
		return err
	}
	_, err = client.WriteSparse(f, r, nil)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), local)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("copy %s: %w", remote, err)
	}
	return nil
}
