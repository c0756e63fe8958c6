// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0006-reload-keeps-hooks.patch; see natsserver/README.md).

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
	"testing"
	"time"
)

// A reload (new options without the embedding program's hooks, as a config
// file gives them) succeeds and keeps the hooks and group commit as they
// were started (patch 0006-reload-keeps-hooks).
func TestReloadKeepsOrderstoreHooks(t *testing.T) {
	o := &Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir(),
		GroupCommit:      true,
		GroupCommitError: func(string, error) {},
		GroupCommitRound: func(string, int, time.Duration) {},
		JetStreamAdmit:   func(*AdmitMsg) ([]byte, *ApiError) { return nil, nil },
		AwaitInterest:    func(string, string) time.Duration { return 0 },
	}
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	n := o.Clone()
	n.GroupCommit, n.GroupCommitError, n.GroupCommitRound, n.JetStreamAdmit, n.AwaitInterest = false, nil, nil, nil, nil
	n.Debug = true // one real change
	if err := s.ReloadOptions(n); err != nil {
		t.Fatalf("reload: %v", err)
	}
	got := s.getOpts()
	if !got.Debug {
		t.Error("the reload did not apply Debug")
	}
	if !got.GroupCommit || got.GroupCommitError == nil || got.GroupCommitRound == nil || got.JetStreamAdmit == nil || got.AwaitInterest == nil {
		t.Errorf("the reload dropped a hook: group commit %v, error %v, round %v, admit %v, await %v", got.GroupCommit,
			got.GroupCommitError != nil, got.GroupCommitRound != nil, got.JetStreamAdmit != nil, got.AwaitInterest != nil)
	}
}
