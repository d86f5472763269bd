package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxhq/sbx/api"
	"github.com/sbxhq/sbx/client"
)

func (a *app) imageCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Manage images (read-only root filesystems)"}
	cmd.AddCommand(a.imageBuildCmd(), a.imageLsCmd(), a.imageRmCmd(), a.imagePullCmd(), a.imageImportCmd())
	return cmd
}

// withProgress runs a long operation with a progress display on stderr.
func (a *app) withProgress(what string, fn func(client.Progress) (*api.Image, error)) error {
	p := newProgress(a.stderr, what)
	img, err := fn(func(msg string, _ time.Time) { p.update(msg) })
	p.done(err == nil)
	if err != nil {
		return err
	}
	if a.output == "json" {
		return a.printJSON(img)
	}
	fmt.Fprintf(a.stdout, "%s %s %s\n", img.Name, img.Digest, humanBytes(img.SizeBytes))
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func (a *app) imageBuildCmd() *cobra.Command {
	var req api.BuildImageRequest
	cmd := &cobra.Command{
		Use:   "build [NAME]",
		Short: "Build an image with mmdebstrap (default: Debian bookworm minbase + " + fmt.Sprint(api.DefaultPackages) + ")",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = "default"
			if len(args) == 1 {
				req.Name = args[0]
			}
			return a.withProgress("building image "+req.Name, func(p client.Progress) (*api.Image, error) {
				return a.c.Images.Build(cmd.Context(), req, p)
			})
		},
	}
	cmd.Flags().StringVar(&req.Suite, "suite", "", "Debian suite (default bookworm)")
	cmd.Flags().StringArrayVar(&req.Packages, "package", nil, "package to include (repeatable; default: the default image's set)")
	cmd.Flags().BoolVar(&req.NoCache, "no-cache", false, "rebuild even if the build cache has this recipe")
	a.addOutput(cmd)
	return cmd
}

func (a *app) imageLsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.checkOutput(); err != nil {
				return err
			}
			imgs, err := a.c.Images.List(cmd.Context())
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.printJSON(imgs)
			}
			var rows [][]string
			for _, img := range imgs {
				d := img.Digest
				if len(d) > 19 {
					d = d[:19]
				}
				rows = append(rows, []string{img.Name, d, humanBytes(img.SizeBytes), age(img.CreateTime), img.Source})
			}
			a.table("NAME\tDIGEST\tSIZE\tAGE\tSOURCE", rows)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

func (a *app) imageRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove an image (refused while sandboxes use it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.c.Images.Delete(cmd.Context(), args[0])
		},
	}
}

func (a *app) imagePullCmd() *cobra.Command {
	var req api.PullImageRequest
	cmd := &cobra.Command{
		Use:   "pull NAME REF",
		Short: "Pull an image from an OCI registry",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name, req.Ref = args[0], args[1]
			return a.withProgress("pulling "+req.Ref, func(p client.Progress) (*api.Image, error) {
				return a.c.Images.Pull(cmd.Context(), req, p)
			})
		},
	}
	cmd.Flags().BoolVar(&req.Insecure, "insecure", false, "allow plain HTTP to the registry")
	cmd.Flags().StringVar(&req.Platform, "platform", "", "platform of a multi-platform image (default linux/amd64)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) imageImportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import NAME PATH",
		Short: "Import an OCI image layout (directory or tar), a docker-save archive or a rootfs tarball",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			fi, err := os.Stat(args[1])
			if err != nil {
				return err
			}
			var body io.Reader
			if fi.IsDir() {
				pr, pw := io.Pipe()
				go func() { pw.CloseWithError(tarDir(args[1], pw)) }()
				body = pr
			} else {
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				body = f
			}
			return a.withProgress("importing "+args[1], func(p client.Progress) (*api.Image, error) {
				return a.c.Images.Import(cmd.Context(), args[0], body, p)
			})
		},
	}
	a.addOutput(cmd)
	return cmd
}
