package main

import (
	"context"
	"errors"
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
	kept := map[string]error{}
	for _, name := range runtime.Names {
		rt, _ := runtime.New(name, filepath.Join(*dataDir, "run", "runtime"))
		err := rt.Check(ctx)
		detail := version(name)
		if err == nil && probe != "" && agentErr == nil {
			_, checkpoints := rt.(runtime.Checkpointer)
			kept[name], err = probeRuntime(ctx, *dataDir, name, probe, checkpoints)
			if err == nil {
				detail += ", ran a command in image " + probe
			}
		}
		if err == nil {
			working++
		}
		ok(err == nil, name+" ("+detail+")", errText(err))
	}
	fmt.Println("sleep that keeps running state (checkpoint and restore)")
	for _, name := range runtime.Names {
		if err, probed := kept[name]; probed {
			ok(err == nil, name, map[bool]string{true: "a sleeping sandbox keeps its processes and memory", false: errText(err)}[err == nil])
		}
	}
	if working == 0 {
		return fmt.Errorf("no OCI runtime works on this host")
	}
	return nil
}

// criuStatus says why crun and runc sandboxes keep files only: Shellgate
// checkpoints through gVisor alone, and CRIU (which runc and crun would
// use) is missing or, as measured with Debian's CRIU 3.17 on kernel 6.18,
// fails its own check.
func criuStatus(ctx context.Context) error {
	const only = "files only: Shellgate checkpoints gVisor (runsc) sandboxes alone"
	out, err := exec.CommandContext(ctx, "criu", "check").CombinedOutput()
	if errors.Is(err, exec.ErrNotFound) {
		return errors.New(only + "; CRIU is not installed")
	}
	if err != nil {
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%s; `criu check` fails here too: %s", only, line)
	}
	return errors.New(only + " (`criu check` passes, but Shellgate does not use CRIU yet)")
}

// probeRuntime starts a real sandbox with runtime name in a throwaway data
// directory that shares the images. On a runtime that checkpoints it also
// puts the sandbox to sleep and wakes it: kept is nil when a file in its
// /tmp (in the sandbox's memory) survived, else why not.
func probeRuntime(ctx context.Context, dataDir, name, img string, checkpoints bool) (kept, err error) {
	kept = criuStatus(ctx)
	tmp, err := os.MkdirTemp("", "shellgate-doctor-")
	if err != nil {
		return kept, err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	m, err := sandbox.Open(ctx, sandbox.Config{DataDir: tmp, Images: filepath.Join(dataDir, "images"), Runtime: name, Image: img, IdleTimeout: -1, HomeBytes: 32 << 20})
	if err != nil {
		return kept, err
	}
	run := func(cmd string) error {
		res, err := m.Exec(ctx, "doctor", sandbox.Command{Command: cmd, TimeoutMs: 30000, MaxBytes: 100})
		if err == nil && (string(res.Stdout) != "ok\n" || res.ExitCode != 0) {
			err = fmt.Errorf("probe command printed %q, exit %d, stderr %q", res.Stdout, res.ExitCode, append(res.Stderr, res.Notes...))
		}
		return err
	}
	err = run("echo ok > /tmp/doctor; cat /tmp/doctor")
	if err == nil && checkpoints {
		if kept = m.Sleep(ctx, "doctor"); kept == nil {
			kept = run("cat /tmp/doctor")
		}
	}
	closeErr := m.Close(context.WithoutCancel(ctx))
	if err != nil {
		return kept, err
	}
	return kept, closeErr
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
