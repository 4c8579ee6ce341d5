// Package mounts answers what the host has mounted below a directory and
// removes directory trees only when nothing is mounted beneath them.
//
// The kernel's mount table (/proc/self/mountinfo) names mount points by
// their resolved paths. A path reached through a symlink matches nothing
// there, so every function here resolves the directory first: a caller
// holding a symlinked path must never conclude "nothing is mounted" and go
// on to delete what a mount still shows.
package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// ErrMounted is returned by RemoveTree for a directory that still has
// something mounted at or below it.
var ErrMounted = errors.New("still has mounts beneath it")

// Resolve returns path absolute, cleaned and with every symlink resolved.
// The path need not exist: the longest existing prefix is resolved and the
// rest appended, so a directory that is yet to be made resolves to where it
// will be.
func Resolve(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	var rest []string
	for p := abs; ; p = filepath.Dir(p) {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, os.ErrNotExist) || p == filepath.Dir(p) {
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		rest = append([]string{filepath.Base(p)}, rest...)
	}
}

// Under lists the mount points at or below dir, parents before children
// (unmount them in reverse). An error reading the mount table is an error,
// never an empty list.
func Under(dir string) ([]string, error) {
	r, err := Resolve(dir)
	if err != nil {
		return nil, err
	}
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(r))
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].ID < infos[j].ID })
	out := make([]string, len(infos))
	for i, mi := range infos {
		out[i] = mi.Mountpoint
	}
	return out, nil
}

// RemoveTree removes dir and everything below it, but only when nothing is
// mounted at or below it: a mount left behind (a failed unmount, a path
// that did not match the mount table) would otherwise have RemoveAll delete
// the mounted file system's contents, such as a sandbox's home. A dir that
// does not exist is not an error.
func RemoveTree(dir string) error {
	if dir == "" || filepath.Clean(dir) == "/" {
		return fmt.Errorf("refusing to remove %q", dir)
	}
	mps, err := Under(dir)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	if len(mps) > 0 {
		return fmt.Errorf("refusing to remove %s: it %w: %s", dir, ErrMounted, strings.Join(mps, ", "))
	}
	return os.RemoveAll(dir)
}
