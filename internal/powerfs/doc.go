// Package powerfs is a FUSE file system for power-loss tests: it passes
// every operation through to a backing directory and can lose power.
//
// # Overview
//
// [Mount] serves a backing directory at a mount point (as root, with
// mount(2) directly: go-fuse's DirectMountStrict, no fusermount). Reads and
// writes go through the daemon, never through kernel passthrough, which
// would hide writes from it. While it runs, the file system keeps what a
// disk would have if the power failed now:
//
//   - Data: per file (by backing inode, so it follows renames and unlinks),
//     the size at its last fsync or fdatasync (or write through an O_SYNC
//     or O_DSYNC handle) and an undo log of the bytes below that size that
//     were overwritten, truncated, punched or zeroed since. Appends cost
//     nothing; an overwrite keeps the old bytes until the next fsync.
//   - Namespace (create, mkdir, unlink, rmdir, rename, link, symlink): a
//     durable copy of the directory tree, updated when a change is made
//     durable. With [Journal] (the default, ext4 and xfs in practice) any
//     fsync commits every namespace change made before it. With [Strict]
//     (POSIX at its word) only an fsync of a directory commits that
//     directory's entries; an fsync of a new file does not make its name
//     durable.
//
// Unlinked files and removed directories are kept (hard links in the
// backing directory's keep/ folder) until the next cut, so their durable
// content can come back and their inode numbers are not reused.
//
// # Lifecycle
//
// [FS.Cut] is the power failure: it waits for the requests in flight, then
// fails every request with EIO. [FS.Restore] unmounts (every user must have
// closed its files: kill the processes, unmount what was mounted on top),
// rewrites the backing directory to the durable state (pre-images newest
// first, truncation to the synced sizes, the durable tree rebuilt) and
// mounts again. [FS.Close] unmounts for good.
//
// The conservative reading is deliberate: whatever was not made durable is
// lost, the worst a real disk may do. Not modelled: torn or reordered
// writes inside what was synced, disks that ignore flushes, and mmap
// writes; xattrs are disabled and special files (mknod, O_TMPFILE) are
// refused.
//
// syncfs(2) never reaches a FUSE daemon (the kernel sends FUSE_SYNCFS to
// virtiofs only), so a program that relies on syncfs is tested with a real
// file system on top: [MkfsExt4] an image on the mount, [AttachLoop] it and
// mount ext4 from the loop device. Every flush or FUA write ext4 issues
// arrives here as an fsync of the image, so a cut loses exactly what the
// disk had not been told to keep, and the next mount replays the journal.
package powerfs
