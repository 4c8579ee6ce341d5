// Command ociimage writes Shellgate's container images as OCI image layouts
// from local files, with no registry pull (package internal/ociimage):
//
//	ociimage -kind gateway -o bin/oci/shellgate -shellgate bin/shellgate -agent bin/shellgate-agent
//	ociimage -kind sandbox -o bin/oci/sandbox -rootfs DIR -agent bin/shellgate-agent
//	ociimage -kind binary -o DIR -bin FILE   (one static binary, its entrypoint: make kube-e2e's pause image)
//
// Load a layout with `skopeo copy oci:bin/oci/shellgate docker-daemon:shellgate:dev`,
// `podman load`, or `kind load image-archive` after `tar -C DIR -cf x.tar .`.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"

	"github.com/shellgate/shellgate/internal/ociimage"
)

const passwd = "root:x:0:0:root:/root:/sbin/nologin\nshellgate:x:1000:1000:shellgate:/var/lib/shellgate:/sbin/nologin\n"
const group = "root:x:0:\nshellgate:x:1000:\n"

func main() {
	kind := flag.String("kind", "gateway", "gateway (shellgate serve) or sandbox (a root filesystem + the agent, for the kube runtime)")
	out := flag.String("o", "", "output directory (the OCI layout)")
	arch := flag.String("arch", goruntime.GOARCH, "image architecture")
	sg := flag.String("shellgate", "bin/shellgate", "gateway: the static shellgate binary")
	agent := flag.String("agent", "bin/shellgate-agent", "the static shellgate-agent binary")
	rootfs := flag.String("rootfs", "", "sandbox: root filesystem directory (e.g. from `shellgate image build`)")
	bin := flag.String("bin", "", "binary: the static binary, at / and the image's entrypoint")
	tag := flag.String("tag", "dev", "ref name in index.json")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "ociimage: -o is required")
		os.Exit(2)
	}
	img := ociimage.Image{Arch: *arch, RefName: *tag}
	dir := func(p string, mode fs.FileMode, uid int) ociimage.File {
		return ociimage.File{Path: p, Dir: true, Mode: mode, UID: uid, GID: uid}
	}
	switch *kind {
	case "gateway":
		img.Files = []ociimage.File{
			dir("/etc", 0o755, 0), dir("/usr", 0o755, 0), dir("/usr/local", 0o755, 0), dir("/usr/local/bin", 0o755, 0),
			dir("/tmp", 0o1777|fs.ModeSticky, 0), dir("/var", 0o755, 0), dir("/var/lib", 0o755, 0), dir("/var/lib/shellgate", 0o700, 1000),
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)},
			{Path: "/etc/group", Mode: 0o644, Data: []byte(group)},
			{Path: "/usr/local/bin/shellgate", Mode: 0o755, Source: *sg},
			{Path: "/usr/local/bin/shellgate-agent", Mode: 0o755, Source: *agent},
		}
		// Upstream model APIs are HTTPS: the host's CA bundle, if it has one.
		if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
			img.Files = append(img.Files, dir("/etc/ssl", 0o755, 0), dir("/etc/ssl/certs", 0o755, 0),
				ociimage.File{Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Source: "/etc/ssl/certs/ca-certificates.crt"})
		}
		img.User = "1000:1000"
		img.Entrypoint = []string{"/usr/local/bin/shellgate"}
		img.Cmd = []string{"serve", "--addr", "0.0.0.0:8080", "--data-dir", "/var/lib/shellgate"}
		img.WorkingDir = "/var/lib/shellgate"
		img.ExposedTCP = []int{8080}
	case "sandbox":
		if *rootfs == "" {
			fmt.Fprintln(os.Stderr, "ociimage: -kind sandbox needs -rootfs")
			os.Exit(2)
		}
		img.RootFS = *rootfs
		img.Files = []ociimage.File{
			dir("/usr/local/bin", 0o755, 0),
			{Path: "/usr/local/bin/shellgate-agent", Mode: 0o755, Source: *agent},
			dir("/workspace", 0o755, 0), dir("/workspace/home", 0o755, 1000),
			dir("/run/shellgate", 0o755, 0),
		}
		img.User = "1000:1000"
		img.Entrypoint = []string{"/usr/local/bin/shellgate-agent"}
		img.WorkingDir = "/workspace/home"
		img.Env = []string{"HOME=/workspace/home", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	case "binary":
		if *bin == "" {
			fmt.Fprintln(os.Stderr, "ociimage: -kind binary needs -bin")
			os.Exit(2)
		}
		img.Files = []ociimage.File{{Path: "/" + filepath.Base(*bin), Mode: 0o755, Source: *bin}}
		img.Entrypoint = []string{"/" + filepath.Base(*bin)}
	default:
		fmt.Fprintf(os.Stderr, "ociimage: -kind %q: want gateway, sandbox or binary\n", *kind)
		os.Exit(2)
	}
	d, err := ociimage.Write(*out, img)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s: %s image %s\n", *out, *kind, d)
}
