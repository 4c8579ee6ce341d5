package store

import "syscall"

// noFollow makes opening a blob that is a symlink fail (os.Root already
// keeps symlinks inside the directory; a blob is never one).
const noFollow = syscall.O_NOFOLLOW
