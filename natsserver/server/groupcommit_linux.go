// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0001-group-commit.patch; see natsserver/README.md).

// Copyright 2026 The orderstore Authors
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package server

import (
	"os"
	"syscall"
)

// datasync is fdatasync(2): a block's data and the size that reads it, not
// its timestamps.
func datasync(f *os.File) error {
	var err error
	if cerr := withFD(f, func(fd int) { err = fdatasync(fd, f.Name()) }); cerr != nil {
		return cerr
	}
	return err
}

// withFD runs fn with f's descriptor (without Fd's switch to blocking mode).
func withFD(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

// fdatasync syncs the data of descriptor fd (the file name is for errors).
func fdatasync(fd int, name string) error {
	for {
		err := syscall.Fdatasync(fd)
		if err != syscall.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: name, Err: err}
			}
			return nil
		}
	}
}

// dupFD duplicates f's descriptor (close-on-exec) for a round to sync;
// -1 when it cannot, and the round opens the file by name instead.
func dupFD(f *os.File) int {
	nfd := -1
	if f == nil {
		return nfd
	}
	withFD(f, func(fd int) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
		if errno == 0 {
			nfd = int(r)
		}
	})
	return nfd
}

func closeFD(fd int) { syscall.Close(fd) }
