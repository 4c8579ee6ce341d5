package image

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
)

// DefaultSuite is the Debian release of the default image.
const DefaultSuite = "bookworm"

// DefaultPackages are installed on top of debootstrap's minbase variant:
// enough for an agent to answer questions about a CSV file, in a shell or
// in the container's Python kernel (IPython's, with matplotlib for charts
// and what a data-analysis sandbox usually has).
var DefaultPackages = []string{
	"bash", "coreutils", "procps", "python3", "python3-pandas", "python3-numpy",
	"python3-ipykernel", "python3-jupyter-client", "python3-matplotlib",
	"python3-scipy", "python3-sklearn", "python3-seaborn", "python3-openpyxl",
	"python3-tabulate",
	"nodejs", "curl", "ca-certificates", "git", "jq", "sqlite3", "file", "unzip",
}

// debianFormat is part of the build key: bump it when the recipe changes
// (trimming, preparation) so existing images are rebuilt.
// Format 3 strips setuid/setgid bits and file capabilities. Format 4
// drops Boost's headers and static archives (see trim).
const debianFormat = 4

// DebianOptions configure BuildDebian. The zero value builds the default
// image.
type DebianOptions struct {
	Suite    string   // default DefaultSuite
	Packages []string // default DefaultPackages
	// Mirror overrides the Debian mirror; by default it is read from the
	// host's apt configuration at run time.
	Mirror string
	// Force rebuilds even if an image with the same build key exists.
	Force bool
	// Progress receives one line per step; nil discards.
	Progress io.Writer
	// EtcApt is the host apt configuration directory (default /etc/apt).
	EtcApt string
}

func (o *DebianOptions) defaults() {
	if o.Suite == "" {
		o.Suite = DefaultSuite
	}
	if len(o.Packages) == 0 {
		o.Packages = DefaultPackages
	}
	if o.EtcApt == "" {
		o.EtcApt = "/etc/apt"
	}
	o.Progress = progressOrDiscard(o.Progress)
}

// debianBuildKey identifies a Debian build recipe: format version, suite and
// the sorted, deduplicated package list (the mirror does not count).
func debianBuildKey(suite string, packages []string) string {
	p := append([]string(nil), packages...)
	sort.Strings(p)
	uniq := p[:0]
	for i, s := range p {
		if i == 0 || s != p[i-1] {
			uniq = append(uniq, s)
		}
	}
	return fmt.Sprintf("debian/v%d suite=%s packages=%s", debianFormat, suite, strings.Join(uniq, ","))
}

// BuildDebian builds a Debian image with debootstrap (minbase variant) plus
// opts.Packages, trims what a sandbox does not need and installs it as
// name. If name is installed with the same build key and opts.Force is not
// set it returns the installed image at once. It needs root.
func (s *Store) BuildDebian(ctx context.Context, name string, opts DebianOptions) (*Image, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	opts.defaults()
	for _, p := range opts.Packages {
		if !debPkgRE.MatchString(p) {
			return nil, fmt.Errorf("invalid Debian package name %q", p)
		}
	}
	key := debianBuildKey(opts.Suite, opts.Packages)
	if !opts.Force {
		if img, err := s.Get(name); err == nil && img.BuildKey == key {
			fmt.Fprintf(opts.Progress, "image %s is up to date (%s, %s)\n", name, humanize.IBytes(uint64(img.SizeBytes)), img.CreatedAt.Local().Format(time.DateTime))
			return img, nil
		}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("building a Debian image needs root (debootstrap, chroot): run it with sudo")
	}
	for _, tool := range []string{"debootstrap", "unshare", "chroot", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("building a Debian image needs %s (apt-get install debootstrap util-linux coreutils mount): %w", tool, err)
		}
	}
	var mirror string
	var sources []aptSource
	if opts.Mirror != "" {
		mirror, sources = opts.Mirror, []aptSource{{URI: opts.Mirror, Suite: opts.Suite, Components: []string{"main"}}}
	} else {
		all, err := readAptSources(opts.EtcApt)
		if err != nil {
			return nil, err
		}
		if mirror, sources, err = debianSources(all, opts.Suite); err != nil {
			return nil, err
		}
	}

	st, err := s.begin(name)
	if err != nil {
		return nil, err
	}
	defer st.abort()
	// Another process may have finished the same build while we waited
	// for the lock.
	if !opts.Force {
		if img, err := s.Get(name); err == nil && img.BuildKey == key {
			fmt.Fprintf(opts.Progress, "image %s is up to date\n", name)
			return img, nil
		}
	}
	b := &debianBuild{ctx: ctx, out: opts.Progress, root: st.rootfs, start: time.Now()}

	b.step(1, "debootstrap %s (minbase) from %s", opts.Suite, mirror)
	if err := b.debootstrap(opts.Suite, mirror); err != nil {
		return nil, err
	}
	b.step(2, "configuring apt")
	if err := b.configure(sources); err != nil {
		return nil, err
	}
	if err := b.chroot(nil, nil, "apt-get", "update"); err != nil {
		return nil, err
	}
	b.step(3, "installing %s", strings.Join(opts.Packages, " "))
	if err := b.install(opts.Packages); err != nil {
		return nil, err
	}
	b.step(4, "trimming (apt lists and caches, docs, man pages, locales)")
	before, _ := diskUsage(st.rootfs)
	if err := b.trim(); err != nil {
		return nil, err
	}
	after, _ := diskUsage(st.rootfs)
	fmt.Fprintf(b.out, "      trimmed %s: %s -> %s\n", humanize.IBytes(uint64(before-after)), humanize.IBytes(uint64(before)), humanize.IBytes(uint64(after)))
	b.step(5, "preparing for sandboxes (user %s %d:%d, %s, %s)", SandboxUser, SandboxUID, SandboxGID, SandboxHome, AgentDir)
	shell, err := prepare(st.rootfs)
	if err != nil {
		return nil, err
	}
	img, err := st.commit(&Image{
		Shell:    shell,
		Source:   fmt.Sprintf("debian %s (debootstrap minbase + %d packages)", opts.Suite, len(opts.Packages)),
		BuildKey: key,
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(b.out, "image %s built in %s: %s at %s\n", name, time.Since(b.start).Round(100*time.Millisecond), humanize.IBytes(uint64(img.SizeBytes)), img.Rootfs)
	return img, nil
}

var debPkgRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)

type debianBuild struct {
	ctx   context.Context
	out   io.Writer
	root  string
	start time.Time
}

const debianSteps = 5

func (b *debianBuild) step(n int, format string, args ...any) {
	fmt.Fprintf(b.out, "[%d/%d] %s (%s)\n", n, debianSteps, fmt.Sprintf(format, args...), time.Since(b.start).Round(time.Second))
}

// chrootEnv is the whole environment of commands run in the image: nothing
// of the host's except proxy settings.
func chrootEnv() []string {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"DEBIAN_FRONTEND=noninteractive", "DEBCONF_NONINTERACTIVE_SEEN=true",
		"LC_ALL=C.UTF-8", "LANG=C.UTF-8", "HOME=/root",
	}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// run runs a command, feeding each output line to onLine (if set). On
// failure the error carries the last lines of output.
func (b *debianBuild) run(cmd *exec.Cmd, onLine func(string)) error {
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 5 * time.Second
	var tail []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if tail = append(tail, line); len(tail) > 15 {
				tail = tail[1:]
			}
			if onLine != nil {
				onLine(line)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, strings.Join(tail, "\n"))
	}
	return nil
}

// debootstrap runs debootstrap in a private mount namespace, so the /proc
// and /sys it mounts in the target vanish with it even if it is killed.
func (b *debianBuild) debootstrap(suite, mirror string) error {
	cmd := exec.CommandContext(b.ctx, "unshare", "--mount", "--propagation", "private",
		"debootstrap", "--variant=minbase", "--components=main", suite, b.root, mirror)
	cmd.Env = chrootEnv()
	// Per-package lines ("I: Retrieving libc6 2.36-9", "I: Validating ...",
	// "I: Extracting ...") are summarized: one line per phase and every 25
	// packages.
	phaseOf := map[string]string{"Retrieving": "downloaded", "Validating": "", "Extracting": "extracted", "Unpacking": "unpacked", "Configuring": "configured"}
	phase, count := "", 0
	flush := func() {
		if phase != "" && count > 0 {
			fmt.Fprintf(b.out, "      debootstrap: %s %d packages (%s)\n", phase, count, time.Since(b.start).Round(time.Second))
		}
		phase, count = "", 0
	}
	return b.run(cmd, func(line string) {
		msg, ok := strings.CutPrefix(line, "I: ")
		if !ok {
			if strings.HasPrefix(line, "W: ") || strings.HasPrefix(line, "E: ") {
				fmt.Fprintf(b.out, "      %s\n", line)
			}
			return
		}
		verb, _, _ := strings.Cut(msg, " ")
		if p, ok := phaseOf[verb]; ok {
			if p == "" {
				return
			}
			if p != phase {
				flush()
				phase = p
			}
			if count++; count%25 == 0 {
				fmt.Fprintf(b.out, "      debootstrap: %s %d packages...\n", phase, count)
			}
			return
		}
		flush()
		fmt.Fprintf(b.out, "      debootstrap: %s\n", msg)
	})
}

// chroot runs a command inside the image with /proc mounted, in a private
// mount namespace.
func (b *debianBuild) chroot(extra []*os.File, onLine func(string), args ...string) error {
	argv := append([]string{"--mount", "--propagation", "private", "sh", "-c",
		`r=$1; shift; mount -t proc proc "$r/proc" && exec chroot "$r" "$@"`, "sh", b.root}, args...)
	cmd := exec.CommandContext(b.ctx, "unshare", argv...)
	cmd.Env = chrootEnv()
	cmd.ExtraFiles = extra
	return b.run(cmd, onLine)
}

func (b *debianBuild) write(rel, content string, mode fs.FileMode) error {
	p := filepath.Join(b.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	os.Remove(p) // never write through a symlink left by a package
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		return err
	}
	return os.Chmod(p, mode)
}

// buildOnlyFiles exist while the image is built and are removed by trim.
var buildOnlyFiles = []string{
	"etc/apt/apt.conf.d/00shellgate-build",
	"usr/sbin/policy-rc.d",
}

func (b *debianBuild) configure(sources []aptSource) error {
	var list strings.Builder
	for _, s := range sources {
		fmt.Fprintf(&list, "deb %s %s %s\n", s.URI, s.Suite, strings.Join(s.Components, " "))
	}
	// apt settings the host relies on to reach its mirror (proxies, a
	// snapshot mirror's expired Release files), for the build only.
	var build strings.Builder
	if out, err := exec.CommandContext(b.ctx, "apt-config", "dump").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			k, _, _ := strings.Cut(line, " ")
			switch {
			case k == "Acquire::Check-Valid-Until", k == "Acquire::Check-Date",
				strings.HasPrefix(k, "Acquire::http::Proxy"), strings.HasPrefix(k, "Acquire::https::Proxy"):
				build.WriteString(line + "\n")
			}
		}
	}
	resolv, _ := os.ReadFile("/etc/resolv.conf")
	files := []struct {
		path, content string
		mode          fs.FileMode
	}{
		{"etc/apt/sources.list", list.String(), 0o644},
		{"etc/apt/apt.conf.d/00shellgate-build", build.String(), 0o644},
		{"etc/apt/apt.conf.d/01shellgate", "APT::Install-Recommends \"false\";\nAPT::Install-Suggests \"false\";\nAcquire::Languages \"none\";\n", 0o644},
		{"etc/dpkg/dpkg.cfg.d/01shellgate-nodoc", dpkgNoDoc, 0o644},
		{"usr/sbin/policy-rc.d", "#!/bin/sh\nexit 101\n", 0o755},
		{"etc/resolv.conf", string(resolv), 0o644},
	}
	for _, f := range files {
		if err := b.write(f.path, f.content, f.mode); err != nil {
			return fmt.Errorf("configure image: %w", err)
		}
	}
	return nil
}

// dpkgNoDoc keeps docs, man pages and translations out of the image (and
// out of anything installed in a sandbox later), keeping copyright files.
const dpkgNoDoc = `path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
`

// install installs packages with apt-get, reporting the package count and
// download/install percentages from apt's status fd.
func (b *debianBuild) install(packages []string) error {
	n := 0
	sim := append([]string{"apt-get", "install", "-s", "-y"}, packages...)
	if err := b.chroot(nil, func(line string) {
		if strings.HasPrefix(line, "Inst ") {
			n++
		}
	}, sim...); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "      %d packages to install (%d requested)\n", n, len(packages))

	sr, sw, err := os.Pipe()
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := map[string]int{"dlstatus": -1, "pmstatus": -1}
		label := map[string]string{"dlstatus": "download", "pmstatus": "install"}
		sc := bufio.NewScanner(sr)
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), ":", 4)
			if len(f) < 4 || label[f[0]] == "" {
				continue
			}
			pct, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				continue
			}
			step := int(pct) / 10 * 10
			if step > last[f[0]] {
				last[f[0]] = step
				fmt.Fprintf(b.out, "      %s %3d%%  %s (%s)\n", label[f[0]], step, f[3], time.Since(b.start).Round(time.Second))
			}
		}
	}()
	args := append([]string{"apt-get", "install", "-y", "-q", "-o", "APT::Status-Fd=3", "-o", "Dpkg::Use-Pty=0"}, packages...)
	err = b.chroot([]*os.File{sw}, nil, args...)
	sw.Close()
	<-done
	sr.Close()
	return err
}

// trim removes what a sandbox does not need and what only the build needed.
func (b *debianBuild) trim() error {
	if err := b.chroot(nil, nil, "apt-get", "clean"); err != nil {
		return err
	}
	var errs []error
	rm := func(rel string) {
		if err := os.RemoveAll(filepath.Join(b.root, rel)); err != nil {
			errs = append(errs, err)
		}
	}
	emptyDir := func(rel string, keep func(string) bool) {
		ents, err := os.ReadDir(filepath.Join(b.root, rel))
		if err != nil {
			return
		}
		for _, e := range ents {
			if keep == nil || !keep(e.Name()) {
				rm(filepath.Join(rel, e.Name()))
			}
		}
	}
	for _, f := range buildOnlyFiles {
		rm(f)
	}
	emptyDir("var/lib/apt/lists", func(n string) bool { return n == "partial" || n == "lock" })
	emptyDir("var/cache/apt", nil)
	emptyDir("var/cache/debconf", func(n string) bool { return !strings.HasSuffix(n, "-old") })
	emptyDir("var/log", nil)
	emptyDir("tmp", nil)
	emptyDir("var/tmp", nil)
	emptyDir("usr/share/man", nil)
	emptyDir("usr/share/info", nil)
	emptyDir("usr/share/lintian", nil)
	emptyDir("usr/share/locale", func(n string) bool { return n == "locale.alias" })
	// scipy depends on pythran (its build's Python-to-C++ compiler),
	// which brings g++, Boost's headers (162 MiB) and static archives
	// (103 MiB). Nothing in a sandbox links statically or compiles
	// against Boost; the compilers themselves stay.
	rm("usr/include/boost")
	filepath.WalkDir(filepath.Join(b.root, "usr/lib"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".a") {
			rm(strings.TrimPrefix(p, b.root+"/"))
		}
		return nil
	})
	// Docs of packages debootstrap installed before the dpkg filter
	// existed: keep only copyright files.
	docs := filepath.Join(b.root, "usr/share/doc")
	filepath.WalkDir(docs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == docs {
			return nil
		}
		if d.IsDir() {
			if filepath.Dir(p) != docs {
				rm(strings.TrimPrefix(p, b.root+"/"))
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "copyright" {
			rm(strings.TrimPrefix(p, b.root+"/"))
		}
		return nil
	})
	// No trace of the build host: name resolution and host name are the
	// runtime's business.
	for _, f := range []struct{ path, content string }{
		{"etc/resolv.conf", ""},
		{"etc/hostname", "sandbox\n"},
		{"etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	} {
		if err := b.write(f.path, f.content, 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
