package natsapi

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// twoPass decodes body as decodeContract alone does (the lenient contract read, then the strict decode):
// what the decoders gave before they tried one strict decode first.
func twoPass[R any](body []byte) (R, error) {
	var req R
	return req, decodeContract(body, &req)
}

var contractBodies = []string{
	`{"contract":1,"agent_ids":["a-1","a-2"]}`,
	`{"contract":1,"agent_ids":["a-1"],"types":["labels","collectors"]}`,
	`{"agent_ids":["a-1"],"contract":1}`,
	` {"contract":1,"agent_ids":[]} `,
	`{"Contract":1,"AGENT_IDS":["a-1"]}`,
	`{"contract":1,"contract":2,"agent_ids":["a"]}`,
	`{"contract":2,"contract":1,"agent_ids":["a"]}`,
	`{"contract":1,"agent_ids":["a\u00e9\n\"x\\"]}`,
	`{"contract":1,"agent_ids":null,"types":null}`,
	`{"contract":1,"agent_ids":["a"],"unknown":true}`,
	`{"contract":2,"agent_ids":["a"],"unknown":true}`,
	`{"contract":2,"agent_ids":["a"]}`,
	`{"contract":0}`,
	`{}`,
	`null`,
	`[]`,
	`"x"`,
	``,
	`   `,
	`{"contract":1.0,"agent_ids":["a"]}`,
	`{"contract":"1","agent_ids":["a"]}`,
	`{"contract":null,"agent_ids":["a"]}`,
	`{"contract":1,"agent_ids":"a"}`,
	`{"contract":1,"agent_ids":[1]}`,
	`{"contract":1,"agent_ids":["a"]}{}`,
	`{"contract":1,"agent_ids":["a"]} x`,
	`{"contract":1,"agent_ids":["a"]`,
	`{"contract":1,"environment_id":"e","config_type":"labels","after":"h","limit":500}`,
	`{"contract":1,"environment_id":"e","config_type":"labels","host_ids":["h1"],"online_since":"2026-12-07T00:00:00Z"}`,
	`{"contract":1,"environment_id":5}`,
	"{\"contract\":1,\"agent_ids\":[\"\xff\"]}",
}

// TestDecodersAreTwoPass checks that the resolve_sets and resolve_push decoders give what decodeContract
// alone gives, request and error, on well-formed, foreign and malformed bodies.
func TestDecodersAreTwoPass(t *testing.T) {
	for _, body := range contractBodies {
		checkTwoPass(t, []byte(body))
	}
}

func FuzzDecodersAreTwoPass(f *testing.F) {
	for _, body := range contractBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(checkTwoPass)
}

func checkTwoPass(t *testing.T, body []byte) {
	t.Helper()
	sets, err := decodeResolveSetsRequest(body)
	wantSets, wantErr := twoPass[protocol.ResolveSetsRequest](body)
	if !sameDecode(sets, err, wantSets, wantErr) {
		t.Errorf("resolve_sets %q: got %+v, %v; want %+v, %v", body, sets, err, wantSets, wantErr)
	}
	push, err := decodeResolvePushRequest(body)
	wantPush, wantErr := twoPass[protocol.ResolvePushRequest](body)
	if !sameDecode(push, err, wantPush, wantErr) {
		t.Errorf("resolve_push %q: got %+v, %v; want %+v, %v", body, push, err, wantPush, wantErr)
	}
}

// sameDecode: the same error (by text), and the same request when there is none (on an error the
// caller drops the request).
func sameDecode(got any, err error, want any, wantErr error) bool {
	if (err == nil) != (wantErr == nil) {
		return false
	}
	if err != nil {
		return err.Error() == wantErr.Error()
	}
	return reflect.DeepEqual(got, want)
}

// BenchmarkDecodeResolveSetsRequest decodes a herd batch's request of 64 agent ids: the decoder
// (one strict decode for a request of this contract) against decodeContract's two decodes.
func BenchmarkDecodeResolveSetsRequest(b *testing.B) {
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = fmt.Sprintf(`"lg-20261202t114455-6948-%06d"`, i)
	}
	body := []byte(`{"contract":1,"agent_ids":[` + strings.Join(ids, ",") + `]}`)
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if req, err := decodeResolveSetsRequest(body); err != nil || len(req.AgentIDs) != 64 {
				b.Fatal(err)
			}
		}
	})
	b.Run("two-pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if req, err := twoPass[protocol.ResolveSetsRequest](body); err != nil || len(req.AgentIDs) != 64 {
				b.Fatal(err)
			}
		}
	})
}
