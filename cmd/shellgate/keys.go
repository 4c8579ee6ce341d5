package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/shellgate/shellgate/internal/store"
)

func init() {
	register("keys", "API keys: keys create --account A --workspace W | list | revoke ID", runKeys)
}

const keysUsage = `usage: shellgate keys create --account A --workspace W [--data-dir DIR | --database postgres://...]
       shellgate keys list [--data-dir DIR | --database postgres://...]
       shellgate keys revoke ID [--data-dir DIR | --database postgres://...]

create prints a new key once, as the last line of its output; only a hash
of it is kept. list shows every key without secrets. revoke makes a key
stop working at once.`

func runKeys(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(os.Stderr, keysUsage)
		return exitError{2}
	}
	verb, args := args[0], args[1:]
	fs := flag.NewFlagSet("keys "+verb, flag.ContinueOnError)
	dataDir := dataDirFlag(fs)
	database := databaseFlag(fs)
	setUsage(fs, keysUsage)
	var account, workspace *string
	switch verb {
	case "create":
		account = fs.String("account", "", "account that owns the key (required)")
		workspace = fs.String("workspace", "", "workspace the key reaches (required)")
	case "list", "ls", "revoke":
	default:
		fs.Usage()
		return fmt.Errorf("unknown keys command %q (want create, list or revoke)", verb)
	}
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	// Allow flags after revoke's ID too: keys revoke ID --data-dir DIR.
	var operands []string
	for fs.NArg() > 0 {
		operands = append(operands, fs.Arg(0))
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return exitError{2}
		}
	}
	switch verb {
	case "create":
		switch {
		case *account == "":
			return errors.New("--account is required")
		case *workspace == "":
			return errors.New("--workspace is required")
		case len(operands) > 0:
			return fmt.Errorf("keys create takes no arguments, got %q", operands)
		}
	case "list", "ls":
		if len(operands) > 0 {
			return fmt.Errorf("keys list takes no arguments, got %q", operands)
		}
	case "revoke":
		if len(operands) != 1 {
			return fmt.Errorf("name exactly one key id (see keys list), got %d", len(operands))
		}
	}

	st, _, err := openStore(ctx, *database, *dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	switch verb {
	case "create":
		key, token, err := st.Keys().Create(ctx, store.Scope{Account: *account, Workspace: *workspace})
		if err != nil {
			return err
		}
		fmt.Printf("Created key %s for account %s, workspace %s.\n", key.ID, key.Account, key.Workspace)
		fmt.Println("It is shown only this once (only its hash is kept); store it now:")
		fmt.Println(token) // the last line: scripts take it with tail -n 1
		return nil
	case "revoke":
		if err := st.Keys().Revoke(ctx, operands[0]); err != nil {
			return err
		}
		fmt.Printf("revoked key %s\n", operands[0])
		return nil
	}
	keys, err := st.Keys().List(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tACCOUNT\tWORKSPACE\tCREATED\tREVOKED")
	for _, k := range keys {
		revoked := "-"
		if k.Revoked() {
			revoked = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Account, k.Workspace, k.CreatedAt.Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}
