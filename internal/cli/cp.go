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
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between the host and a sandbox",
		Long: "Copy files between the host and a sandbox. One side is NAME:/abs/path.\n" +
			"A directory is copied with its contents into DST (created if missing);\n" +
			"a file is copied to DST, or into DST when DST is an existing directory or ends with /.",
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
				return a.download(cmd, sb, srcPath, args[1])
			}
		},
	}
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
		return sb.WriteFile(cmd.Context(), remote, f, uint32(fi.Mode().Perm()))
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(local, pw)) }()
	return sb.Upload(cmd.Context(), remote, pr)
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

func (a *app) download(cmd *cobra.Command, sb *client.Sandbox, remote, local string) error {
	rf, err := sb.OpenFile(cmd.Context(), remote)
	if err == nil {
		defer rf.Close()
		if fi, err := os.Stat(local); (err == nil && fi.IsDir()) || strings.HasSuffix(local, "/") {
			local = filepath.Join(local, filepath.Base(remote))
		}
		mode := fs.FileMode(rf.Mode) & fs.ModePerm
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
		_, err = io.Copy(f, rf)
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
	var ae *client.Error
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(ae.Message, "is a directory") {
		return err
	}
	tr, err := sb.Download(cmd.Context(), remote)
	if err != nil {
		return err
	}
	defer tr.Close()
	return untarInto(tr, local)
}

// untarInto extracts a tar into dir through an os.Root: no entry, and no
// symlink an earlier entry made, can write outside dir.
func untarInto(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "/"))
		if name == "." {
			continue
		}
		if name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("archive entry %q leaves %s", hdr.Name, dir)
		}
		mode := fs.FileMode(hdr.Mode) & fs.ModePerm
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			_ = root.Chmod(name, mode)
		case tar.TypeReg:
			// Replace, never write through, what is there (a symlink).
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			_ = root.Chmod(name, mode)
			_ = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
		case tar.TypeSymlink:
			if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
	}
}
