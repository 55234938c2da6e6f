package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"z.gfire.dev/gvx/core/image"
	"z.gfire.dev/gvx/core/store"
)

func newPullCommand(g *globalFlags) *cobra.Command {
	var (
		insecure bool
		platform string
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "pull [flags] REF",
		Short: "Convert an image into the cache",
		Long: `Pull resolves an image reference, streams its layers and writes a read-only
EROFS root filesystem into the cache. References:

  REGISTRY-REF                    docker.io/library/python:3.11-slim, 127.0.0.1:5000/x:tag, repo@sha256:…
  oci:DIR[:TAG|@DIGEST]           an OCI image layout directory
  docker-archive:FILE.tar[:REF]   a ` + "`docker save`" + ` tarball

Registry credentials come from ~/.docker/config.json.`,
		Example: `  rungv pull oci:./busybox-oci:latest
  rungv pull --insecure 127.0.0.1:5000/team/app:v3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.store()
			if err != nil {
				return err
			}
			opts := store.PullOptions{Options: image.Options{Insecure: insecure}}
			if platform != "" {
				p, err := v1.ParsePlatform(platform)
				if err != nil || !strings.Contains(platform, "/") || p.OS == "" || p.Architecture == "" {
					return fmt.Errorf("--platform %q: want OS/ARCH[/VARIANT], e.g. linux/amd64", platform)
				}
				if p.OS != "linux" {
					return fmt.Errorf("--platform %q: gvx runs linux images only", platform)
				}
				opts.Platform = *p
			}
			var r *pullReporter
			if !quiet {
				r = newPullReporter(os.Stderr)
				opts.Progress = r.event
			}
			img, err := s.Pull(cmd.Context(), args[0], opts)
			if r != nil {
				r.finish()
			}
			if err != nil {
				return err
			}
			fmt.Println(img.ID)
			return nil
		},
	}
	cmd.Flags().BoolVar(&insecure, "insecure", false, "allow plain HTTP and unverified TLS to the registry")
	cmd.Flags().StringVar(&platform, "platform", "", "platform to pick from a multi-platform image (default linux/amd64)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the image ID")
	return cmd
}

func newImagesCommand(g *globalFlags) *cobra.Command {
	var (
		quiet  bool
		format string
	)
	cmd := &cobra.Command{
		Use:   "images [flags]",
		Short: "List cached images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.store()
			if err != nil {
				return err
			}
			imgs, err := s.List()
			if err != nil {
				return err
			}
			switch {
			case format == "json":
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				type row struct {
					*store.Image
					Refs  []string `json:"refs"`
					Erofs string   `json:"erofs"`
				}
				rows := make([]row, 0, len(imgs))
				for _, img := range imgs {
					rows = append(rows, row{img, img.Refs, img.ErofsPath()})
				}
				return enc.Encode(rows)
			case format != "":
				return fmt.Errorf("--format %q: only json is supported", format)
			case quiet:
				for _, img := range imgs {
					fmt.Println(img.ShortID())
				}
				return nil
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "REFERENCE\tIMAGE ID\tCREATED\tSIZE\tFILES")
			for _, img := range imgs {
				refs := img.Refs
				if len(refs) == 0 {
					refs = []string{"<none>"}
				}
				for _, ref := range refs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", ref, img.ShortID(), ago(img.Created), humanBytes(img.Size), img.Files)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only image IDs")
	cmd.Flags().StringVar(&format, "format", "", "output format: json")
	return cmd
}

func newRmiCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "rmi REF|ID...",
		Short: "Remove images from the cache",
		Long: `Rmi removes a reference; the image goes when no reference names it any more.
Given an image ID, it removes the image and all its references. Sandboxes
already running from the image are not affected.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.store()
			if err != nil {
				return err
			}
			var failed error
			for _, a := range args {
				r, err := s.Remove(cmd.Context(), a)
				for _, u := range r.Untagged {
					fmt.Println("Untagged:", u)
				}
				for _, d := range r.Deleted {
					fmt.Println("Deleted:", d)
				}
				if err != nil {
					fmt.Fprintln(os.Stderr, "rungv rmi:", err)
					failed = exitError(1)
				}
			}
			return failed
		},
	}
}

func newPruneCommand(g *globalFlags) *cobra.Command {
	var all, force bool
	cmd := &cobra.Command{
		Use:   "prune [flags]",
		Short: "Remove images no reference names, and leftovers of interrupted pulls",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := g.store()
			if err != nil {
				return err
			}
			if !force {
				what := "images that no reference names"
				if all {
					what = "ALL cached images"
				}
				if !term.IsTerminal(int(os.Stdin.Fd())) {
					return fmt.Errorf("this removes %s; pass -f to confirm when not on a terminal", what)
				}
				fmt.Fprintf(os.Stderr, "This removes %s from %s. Continue? [y/N] ", what, s.Root())
				answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return nil
				}
			}
			rep, err := s.Prune(cmd.Context(), all)
			for _, d := range rep.Deleted {
				fmt.Println("Deleted:", d)
			}
			fmt.Printf("Reclaimed %s", humanBytes(rep.Reclaimed))
			if rep.Leftovers > 0 {
				fmt.Printf(" (and %d leftovers of interrupted pulls)", rep.Leftovers)
			}
			fmt.Println()
			return err
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "remove all images, not just unreferenced ones")
	cmd.Flags().BoolVarP(&force, "force", "f", false, "do not ask for confirmation")
	return cmd
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

func ago(t time.Time) string {
	if t.IsZero() || t.Unix() <= 0 {
		return "unknown"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "seconds ago"
	case d < time.Hour:
		return fmt.Sprintf("%d minutes ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours ago", int(d.Hours()))
	case d < 60*24*time.Hour:
		return fmt.Sprintf("%d days ago", int(d.Hours()/24))
	case d < 2*365*24*time.Hour:
		return fmt.Sprintf("%d months ago", int(d.Hours()/24/30))
	}
	return fmt.Sprintf("%d years ago", int(d.Hours()/24/365))
}
