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

//go:build !linux

package server

import "os"

// datasync is fsync where fdatasync is not available.
func datasync(f *os.File) error { return f.Sync() }

// dupFD: elsewhere a round opens each block by name.
func dupFD(*os.File) int { return -1 }

func fdatasync(int, string) error { return nil }

func closeFD(int) {}
