package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/shellgate/shellgate/sandbox/image"
)

func init() {
	register("image", "build, import, list and remove root filesystems", runImage)
}

const imageUsage = `usage: shellgate image COMMAND [FLAGS] [ARGS]

commands:
  build [--busybox] [--force] [--mirror URL] [NAME]
                     build the Debian image (default name "default"), or with
                     --busybox the tiny busybox image (default name "busybox")
  import NAME PATH   import a directory or an OCI image tarball (also docker save)
  list               list installed images
  rm NAME...         remove images

Every command takes --data-dir DIR (env SHELLGATE_DATA); images live in DIR/images.
`

func runImage(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, imageUsage)
		return exitError{2}
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "build":
		return imageBuild(ctx, rest)
	case "import":
		return imageImport(ctx, rest)
	case "list", "ls":
		return imageList(rest)
	case "rm", "remove":
		return imageRemove(rest)
	}
	fmt.Fprintf(os.Stderr, "shellgate image: unknown command %q\n\n%s", sub, imageUsage)
	return exitError{2}
}

// parseFlags parses flags that may come before or after the positional
// arguments and returns the positional ones.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, exitError{2}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// dataDirArgs parses the arguments of a subcommand whose only flag is
// --data-dir: the data directory and the positional arguments.
func dataDirArgs(name string, args []string) (dataDir string, pos []string, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	dir := dataDirFlag(fs)
	pos, err = parseFlags(fs, args)
	return *dir, pos, err
}

func openImageStore(dataDir string) (*image.Store, error) {
	return image.Open(filepath.Join(dataDir, "images"))
}

func imageBuild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("shellgate image build", flag.ContinueOnError)
	dataDir := dataDirFlag(fs)
	busybox := fs.Bool("busybox", false, "build the tiny busybox image instead of the Debian one")
	force := fs.Bool("force", false, "rebuild even if the image is up to date")
	mirror := fs.String("mirror", "", "Debian mirror URL (default: from the host's apt sources)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return fmt.Errorf("build takes at most one image name, got %q", pos)
	}
	name := "default"
	if *busybox {
		name = "busybox"
	}
	if len(pos) == 1 {
		name = pos[0]
	}
	if err := image.ValidateName(name); err != nil {
		return err
	}
	if os.Geteuid() != 0 && (*busybox || *force) {
		return errors.New("building images needs root (images are owned by root and shared read-only): run it with sudo")
	}
	store, err := openImageStore(*dataDir)
	if err != nil {
		return err
	}
	start := time.Now()
	if *busybox {
		img, err := store.BuildBusybox(ctx, name)
		if err != nil {
			return err
		}
		fmt.Printf("image %s built in %s: %s at %s\n", img.Name, time.Since(start).Round(time.Millisecond), humanize.IBytes(uint64(img.SizeBytes)), img.Rootfs)
		return nil
	}
	_, err = store.BuildDebian(ctx, name, image.DebianOptions{Force: *force, Mirror: *mirror, Progress: os.Stdout})
	return err
}

func imageImport(ctx context.Context, args []string) error {
	dataDir, pos, err := dataDirArgs("shellgate image import", args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("usage: shellgate image import NAME PATH (a directory or an OCI image tarball)")
	}
	name, src := pos[0], pos[1]
	if err := image.ValidateName(name); err != nil {
		return err
	}
	if _, err := os.Stat(src); err != nil {
		return fmt.Errorf("import %s: %w", src, err)
	}
	if os.Geteuid() != 0 {
		return errors.New("importing images needs root (to keep file owners; images are shared read-only): run it with sudo")
	}
	store, err := openImageStore(dataDir)
	if err != nil {
		return err
	}
	start := time.Now()
	img, err := store.Import(ctx, name, src, os.Stdout)
	if err != nil {
		return err
	}
	fmt.Printf("image %s imported in %s: %s, shell %s\n", img.Name, time.Since(start).Round(time.Millisecond), humanize.IBytes(uint64(img.SizeBytes)), strings.Join(img.Shell, " "))
	return nil
}

func imageList(args []string) error {
	dataDir, pos, err := dataDirArgs("shellgate image list", args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("list takes no arguments, got %q", pos)
	}
	store, err := openImageStore(dataDir)
	if err != nil {
		return err
	}
	imgs, err := store.List()
	if err != nil {
		return err
	}
	return printImages(os.Stdout, imgs)
}

func printImages(w io.Writer, imgs []image.Image) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSIZE\tCREATED\tSHELL\tSOURCE")
	for _, img := range imgs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", img.Name, humanize.IBytes(uint64(img.SizeBytes)),
			img.CreatedAt.Local().Format("2006-01-02 15:04"), strings.Join(img.Shell, " "), img.Source)
	}
	return tw.Flush()
}

func imageRemove(args []string) error {
	dataDir, pos, err := dataDirArgs("shellgate image rm", args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return errors.New("usage: shellgate image rm NAME...")
	}
	for _, n := range pos {
		if err := image.ValidateName(n); err != nil {
			return err
		}
	}
	store, err := openImageStore(dataDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range pos {
		if err := store.Remove(n); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Printf("removed image %s\n", n)
	}
	return errors.Join(errs...)
}
