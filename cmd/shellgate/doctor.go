package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/shellgate/shellgate/sandbox"
	"github.com/shellgate/shellgate/sandbox/agent/agentbin"
	"github.com/shellgate/shellgate/sandbox/egress"
	"github.com/shellgate/shellgate/sandbox/image"
	"github.com/shellgate/shellgate/sandbox/runtime"
)

func init() {
	register("doctor", "report which runtimes and features work on this host, and why not", runDoctor)
}

func runDoctor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	dataDir := dataDirFlag(fs)
	if err := fs.Parse(args); err != nil {
		return exitError{2}
	}
	ok := func(cond bool, what, why string) {
		mark := "ok  "
		if !cond {
			mark = "FAIL"
		}
		if why != "" {
			what += ": " + why
		}
		fmt.Printf("  %s %s\n", mark, what)
	}
	fmt.Println("host")
	ok(os.Geteuid() == 0, "running as root", map[bool]string{true: "", false: "sandboxes need root (mounts, cgroups, OCI runtimes)"}[os.Geteuid() == 0])
	_, loopErr := os.Stat("/dev/loop-control")
	ok(loopErr == nil, "loop devices (disk-capped homes)", errText(loopErr))
	_, mkfsErr := exec.LookPath("mkfs.ext4")
	ok(mkfsErr == nil, "mkfs.ext4", errText(mkfsErr))
	ok(hasFS("overlay"), "overlayfs (writable layer over the shared image)", "")
	agent, agentErr := agentbin.Find()
	ok(agentErr == nil, "sandbox agent "+agent, errText(agentErr))
	if eg, err := egress.New(egress.Config{}); err != nil {
		ok(false, "network allowlists", err.Error())
	} else {
		ok(true, "network allowlists", "firewall "+eg.Firewall()+", sandbox addresses from "+eg.Pool().String())
	}

	fmt.Println("images (" + filepath.Join(*dataDir, "images") + ")")
	store, err := image.Open(filepath.Join(*dataDir, "images"))
	var images []image.Image
	if err == nil {
		images, err = store.List()
	}
	ok(err == nil && len(images) > 0, fmt.Sprintf("%d image(s) installed", len(images)), map[bool]string{true: "", false: "run `shellgate image build`"}[len(images) > 0])
	for _, img := range images {
		fmt.Printf("       %s (%s, %.0f MiB)\n", img.Name, img.Source, float64(img.SizeBytes)/(1<<20))
	}
	probe := ""
	for _, want := range []string{"busybox", "default"} {
		for _, img := range images {
			if img.Name == want && probe == "" {
				probe = want
			}
		}
	}

	fmt.Println("runtimes (strongest first)")
	working := 0
	for _, name := range runtime.Names {
		rt, _ := runtime.New(name, filepath.Join(*dataDir, "run", "runtime"))
		err := rt.Check(ctx)
		detail := version(name)
		if err == nil && probe != "" && agentErr == nil {
			err = probeRuntime(ctx, *dataDir, name, probe)
			if err == nil {
				detail += ", ran a command in image " + probe
			}
		}
		if err == nil {
			working++
		}
		ok(err == nil, name+" ("+detail+")", errText(err))
	}
	if working == 0 {
		return fmt.Errorf("no OCI runtime works on this host")
	}
	return nil
}

// probeRuntime starts a real sandbox with runtime name in a throwaway data
// directory that shares the images.
func probeRuntime(ctx context.Context, dataDir, name, img string) error {
	tmp, err := os.MkdirTemp("", "shellgate-doctor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	m, err := sandbox.Open(ctx, sandbox.Config{DataDir: tmp, Images: filepath.Join(dataDir, "images"), Runtime: name, Image: img, IdleTimeout: -1, HomeBytes: 32 << 20})
	if err != nil {
		return err
	}
	res, err := m.Exec(ctx, "doctor", sandbox.Command{Command: "echo ok", TimeoutMs: 30000, MaxBytes: 100})
	closeErr := m.Close(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	if string(res.Stdout) != "ok\n" || res.ExitCode != 0 {
		return fmt.Errorf("probe command printed %q, exit %d, stderr %q", res.Stdout, res.ExitCode, res.Stderr)
	}
	return closeErr
}

func version(name string) string {
	out, err := exec.Command(name, "--version").CombinedOutput()
	if err != nil {
		return "version unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func hasFS(fs string) bool {
	b, _ := os.ReadFile("/proc/filesystems")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[len(f)-1] == fs {
			return true
		}
	}
	return false
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
