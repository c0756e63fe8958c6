// Package leaderget reads a stream's last message on a subject from the stream's leader. A KV get
// is a direct get, which any replica may answer with what it has applied so far: a compare-and-set
// that follows it can then name a revision the leader has moved past, though this very client wrote
// the newer one. The JetStream API's message get is answered by the leader.
package leaderget

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Timeout bounds each read, like the jetstream package's own requests: a
// leader that dies with the request would otherwise never answer it.
const Timeout = 5 * time.Second

// LastBySubject reads the last message on subject of stream from the stream's leader: its data and
// sequence (0: there is none), and whether it is a KV delete or purge, or an expired record's
// marker. A stream that does not exist is jetstream.ErrStreamNotFound.
func LastBySubject(ctx context.Context, js jetstream.JetStream, stream, subject string) (data []byte, seq uint64, deleted bool, err error) {
	o := js.Options()
	prefix := o.APIPrefix
	switch {
	case o.Domain != "":
		prefix = "$JS." + o.Domain + ".API."
	case prefix == "":
		prefix = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	req, _ := json.Marshal(map[string]string{"last_by_subj": subject})
	rctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	msg, err := js.Conn().RequestWithContext(rctx, prefix+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, 0, false, err
	}
	var resp struct {
		Message *struct {
			Seq  uint64 `json:"seq"`
			Data []byte `json:"data"`
			Hdrs []byte `json:"hdrs"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return nil, 0, false, err
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, 0, false, nil
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		return nil, 0, false, jetstream.ErrStreamNotFound
	case resp.Error != nil:
		return nil, 0, false, resp.Error
	case resp.Message == nil:
		return nil, 0, false, errors.New("an empty answer")
	}
	// A delete or purge, or the marker nats leaves where a record expired (LimitMarkerTTL).
	h := string(resp.Message.Hdrs)
	deleted = strings.Contains(h, "KV-Operation: DEL") || strings.Contains(h, "KV-Operation: PURGE") || strings.Contains(h, jetstream.MarkerReasonHeader+":")
	return resp.Message.Data, resp.Message.Seq, deleted, nil
}
