package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/dustin/go-humanize"

	"github.com/shellgate/shellgate/sandbox"
)

func init() {
	register("sandbox", "list sandboxes and delete their homes: sandbox list | rm NAME...", runSandbox)
}

func runSandbox(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	dataDir := dataDirFlag(fs)
	storageSpec := storageFlag(fs)
	setUsage(fs, "usage: shellgate sandbox list | rm NAME...\n\nlist shows every sandbox with a home on this node; rm deletes sandboxes and their homes (with --storage s3://..., their archives too).")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return exitError{2}
	}
	verb, names := fs.Arg(0), fs.Args()[1:]
	switch verb {
	case "list", "ls":
		if len(names) > 0 {
			return fmt.Errorf("sandbox list takes no names")
		}
	case "rm":
		if len(names) == 0 {
			return fmt.Errorf("sandbox rm: name at least one sandbox")
		}
		for _, n := range names {
			if !sandbox.ValidName(n) {
				return fmt.Errorf("%w: %q", sandbox.ErrBadName, n)
			}
		}
	default:
		fs.Usage()
		return fmt.Errorf("unknown sandbox command %q", verb)
	}
	var archive sandbox.HomeArchive
	if verb == "rm" {
		st, err := openStorage(ctx, *storageSpec, *dataDir)
		if err != nil {
			return err
		}
		defer st.close()
		archive = st.archive
	}
	mgr, err := sandbox.Open(ctx, sandbox.Config{DataDir: *dataDir, IdleTimeout: -1, HomeArchive: archive})
	if err != nil {
		return err
	}
	defer mgr.Close(context.WithoutCancel(ctx))
	if verb == "rm" {
		var errs []error
		for _, n := range names {
			if err := mgr.Destroy(ctx, n); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Printf("removed sandbox %s\n", n)
		}
		return errors.Join(errs...)
	}
	infos, err := mgr.List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tDISK\tQUOTA\tLAST USED")
	for _, in := range infos {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", in.Name, in.Status, humanize.IBytes(uint64(in.DiskBytes)), humanize.IBytes(uint64(in.QuotaBytes)), humanize.Time(in.LastUsed))
	}
	return tw.Flush()
}
