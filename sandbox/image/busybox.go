package image

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"strings"
)

// HostBusybox is the static busybox the busybox image is made from (Debian
// package busybox-static).
var HostBusybox = "/bin/busybox"

const busyboxProfile = `export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME="${HOME:-/workspace/home}"
`

// BuildBusybox builds a tiny image from the host's static busybox: the
// binary, a symlink per applet, and minimal /etc files. Its shell is
// /bin/sh -lc (busybox has no bash). It always rebuilds (it takes
// milliseconds).
func (s *Store) BuildBusybox(ctx context.Context, name string) (*Image, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	bin, version, err := checkBusybox(ctx, HostBusybox)
	if err != nil {
		return nil, err
	}
	applets, err := busyboxApplets(ctx, HostBusybox)
	if err != nil {
		return nil, err
	}
	st, err := s.begin(name)
	if err != nil {
		return nil, err
	}
	defer st.abort()

	r, err := os.OpenRoot(st.rootfs)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "run", "var/tmp"} {
		if err := r.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := r.Chmod("root", 0o700); err != nil {
		return nil, err
	}
	if err := r.Chmod("var/tmp", 0o777|os.ModeSticky); err != nil {
		return nil, err
	}
	if err := r.WriteFile("bin/busybox", bin, 0o755); err != nil {
		return nil, err
	}
	if err := r.Chmod("bin/busybox", 0o755); err != nil {
		return nil, err
	}
	for _, a := range applets {
		if a == "bin/busybox" {
			continue
		}
		if err := r.Symlink("/bin/busybox", a); err != nil && !os.IsExist(err) {
			return nil, fmt.Errorf("busybox applet %s: %w", a, err)
		}
	}
	if _, err := r.Lstat("bin/sh"); err != nil {
		if err := r.Symlink("/bin/busybox", "bin/sh"); err != nil {
			return nil, err
		}
	}
	files := map[string]string{
		"etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
		"etc/group":         "root:x:0:\nnogroup:x:65534:\n",
		"etc/hosts":         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/hostname":      "sandbox\n",
		"etc/resolv.conf":   "",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
		"etc/profile":       busyboxProfile,
	}
	for p, c := range files {
		if err := r.WriteFile(p, []byte(c), 0o644); err != nil {
			return nil, err
		}
	}
	shell, err := prepare(st.rootfs)
	if err != nil {
		return nil, err
	}
	return st.commit(&Image{Shell: shell, Source: "busybox " + version + " (" + HostBusybox + ")"})
}

// checkBusybox reads the host busybox and makes sure it is statically
// linked (a dynamic one would need the host's libc inside the image).
func checkBusybox(ctx context.Context, p string) ([]byte, string, error) {
	bin, err := os.ReadFile(p)
	if err != nil {
		return nil, "", fmt.Errorf("busybox image needs a static busybox at %s (apt-get install busybox-static): %w", p, err)
	}
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil, "", fmt.Errorf("%s: not an ELF binary: %w", p, err)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return nil, "", fmt.Errorf("%s is dynamically linked; the busybox image needs a static one (apt-get install busybox-static)", p)
		}
	}
	out, _ := exec.CommandContext(ctx, p).Output() // busybox with no args prints its banner and exits 1
	version := "unknown"
	if line, _, _ := strings.Cut(string(out), "\n"); strings.HasPrefix(line, "BusyBox ") {
		if f := strings.Fields(line); len(f) > 1 {
			version = f[1]
		}
	}
	return bin, version, nil
}

// busyboxApplets lists the applets' install paths (e.g. "usr/bin/awk").
func busyboxApplets(ctx context.Context, p string) ([]string, error) {
	out, err := exec.CommandContext(ctx, p, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", p, err)
	}
	var applets []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		a := path.Clean(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "/"))
		if a == "." || strings.HasPrefix(a, "..") || !strings.Contains(a, "/") {
			continue
		}
		applets = append(applets, a)
	}
	if len(applets) == 0 {
		return nil, fmt.Errorf("%s --list-full listed no applets", p)
	}
	return applets, nil
}

func progressOrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}
