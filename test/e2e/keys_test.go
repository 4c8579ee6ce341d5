package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/shellgate/shellgate/internal/store"
	"github.com/shellgate/shellgate/internal/store/sqlstore"
	"github.com/shellgate/shellgate/sandbox/sandboxtest"
)

// TestKeysCLI drives `shellgate keys` as scripts do. It needs no root and
// no runtime: keys live in DATA/shellgate.db.
func TestKeysCLI(t *testing.T) {
	bin := sandboxtest.BuildCLI(t)
	run := func(env []string, args ...string) (stdout, stderr string, code int) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), env...)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return so.String(), se.String(), code
	}
	tokenRE := regexp.MustCompile(`^sgk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$`)
	authenticate := func(t *testing.T, data, token string) error {
		st, err := sqlstore.OpenSQLite(t.Context(), data)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		_, err = st.Keys().Authenticate(t.Context(), token)
		return err
	}

	t.Run("01 create prints the key last; list hides it; revoke stops it", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data") // not there yet: create makes it
		out, stderr, code := run(nil, "keys", "create", "--account", "acme", "--workspace", "prod", "--data-dir", data)
		if code != 0 || stderr != "" || !strings.HasSuffix(out, "\n") {
			t.Fatalf("create: exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		token := lastLine(out)
		if !tokenRE.MatchString(token) {
			t.Fatalf("last line %q is not a key", token)
		}
		id := "key_" + token[4:20]
		if !strings.Contains(out, id) {
			t.Fatalf("create does not name the key id %s:\n%s", id, out)
		}
		if err := authenticate(t, data, token); err != nil {
			t.Fatalf("the printed key does not authenticate: %v", err)
		}
		out, stderr, code = run(nil, "keys", "list", "--data-dir", data)
		if code != 0 || stderr != "" {
			t.Fatalf("list: exit %d, %q", code, stderr)
		}
		secret := token[21:]
		if strings.Contains(out, secret) || strings.Contains(out, token) {
			t.Fatalf("list shows the secret:\n%s", out)
		}
		row := regexp.MustCompile(`(?m)^` + id + `\s+acme\s+prod\s+\d{4}-\d\d-\d\dT\S+Z\s+-$`)
		if !strings.HasPrefix(out, "ID ") || !row.MatchString(out) {
			t.Fatalf("list:\n%s", out)
		}
		out, stderr, code = run(nil, "keys", "revoke", id, "--data-dir", data)
		if code != 0 || out != "revoked key "+id+"\n" {
			t.Fatalf("revoke: exit %d, stdout %q, stderr %q", code, out, stderr)
		}
		if err := authenticate(t, data, token); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("revoked key: %v", err)
		}
		out, _, _ = run(nil, "keys", "list", "--data-dir", data)
		if row.MatchString(out) || !regexp.MustCompile(`(?m)^`+id+`\s+acme\s+prod\s+\S+\s+\d{4}-\d\d-\d\dT\S+Z$`).MatchString(out) {
			t.Fatalf("list after revoke does not show it revoked:\n%s", out)
		}
		if _, stderr, code = run(nil, "keys", "revoke", "--data-dir", data, id); code != 0 {
			t.Fatalf("revoking twice: exit %d, %q", code, stderr)
		}
	})
	t.Run("02 SHELLGATE_DATA is the default data directory", func(t *testing.T) {
		data := t.TempDir()
		out, _, code := run([]string{"SHELLGATE_DATA=" + data}, "keys", "create", "--account", "a", "--workspace", "w")
		if code != 0 {
			t.Fatalf("create: exit %d", code)
		}
		if err := authenticate(t, data, lastLine(out)); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(data, sqlstore.DBFile)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("03 processes creating keys at once in a new data directory", func(t *testing.T) {
		data := filepath.Join(t.TempDir(), "data")
		var wg sync.WaitGroup
		tokens := make([]string, 4)
		for i := range tokens {
			wg.Go(func() {
				out, stderr, code := run(nil, "keys", "create", "--account", "a", "--workspace", "w", "--data-dir", data)
				if code != 0 {
					t.Errorf("create %d: exit %d, %s", i, code, stderr)
				}
				tokens[i] = lastLine(out)
			})
		}
		wg.Wait()
		for _, tok := range tokens {
			if err := authenticate(t, data, tok); err != nil {
				t.Fatalf("%q: %v", tok, err)
			}
		}
	})
	t.Run("04 bad input gives a clear error", func(t *testing.T) {
		data := t.TempDir()
		cases := []struct {
			name string
			args []string
			code int
			want string
		}{
			{"01 no verb", []string{"keys"}, 2, "usage: shellgate keys create"},
			{"02 unknown verb", []string{"keys", "rotate"}, 1, `unknown keys command "rotate"`},
			{"03 no account", []string{"keys", "create", "--workspace", "w", "--data-dir", data}, 1, "--account is required"},
			{"04 no workspace", []string{"keys", "create", "--account", "a", "--data-dir", data}, 1, "--workspace is required"},
			{"05 unknown flag", []string{"keys", "create", "--acount", "a", "--workspace", "w"}, 2, "flag provided but not defined: -acount"},
			{"06 flag without a value", []string{"keys", "create", "--workspace", "w", "--account"}, 2, "flag needs an argument: -account"},
			{"07 bad account", []string{"keys", "create", "--account", "a b", "--workspace", "w", "--data-dir", data}, 1, `account "a b": want 1-64 letters`},
			{"08 bad workspace", []string{"keys", "create", "--account", "a", "--workspace", "../w", "--data-dir", data}, 1, `workspace "../w"`},
			{"09 create with an argument", []string{"keys", "create", "--account", "a", "--workspace", "w", "--data-dir", data, "extra"}, 1, "keys create takes no arguments"},
			{"10 revoke without an id", []string{"keys", "revoke", "--data-dir", data}, 1, "name exactly one key id"},
			{"11 revoke of two ids", []string{"keys", "revoke", "--data-dir", data, "key_1", "key_2"}, 1, "name exactly one key id"},
			{"12 revoke of an unknown key", []string{"keys", "revoke", "--data-dir", data, "key_0000000000000000"}, 1, "key key_0000000000000000: not found"},
			{"13 list with an argument", []string{"keys", "list", "--data-dir", data, "x"}, 1, "keys list takes no arguments"},
			{"14 unusable data directory", []string{"keys", "list", "--data-dir", "/dev/null/x"}, 2, "invalid value \"/dev/null/x\" for flag -data-dir"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				out, stderr, code := run(nil, c.args...)
				if code != c.code || !strings.Contains(stderr, c.want) {
					t.Fatalf("exit %d (want %d), stderr %q, want %q", code, c.code, stderr, c.want)
				}
				if tokenRE.MatchString(lastLine(out)) {
					t.Fatalf("a key was printed: %q", out)
				}
			})
		}
		// None of the bad creates made a key.
		out, _, _ := run(nil, "keys", "list", "--data-dir", data)
		if strings.Count(out, "\n") != 1 {
			t.Fatalf("keys after bad input:\n%s", out)
		}
	})
}
