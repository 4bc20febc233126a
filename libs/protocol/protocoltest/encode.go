// Package protocoltest holds what tests of the wire contract's users share: encodings of protocol
// messages as the services that send them write them.
package protocoltest

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/configsync/configsync/libs/protocol"
)

// EncodeSetsLikeResolver writes reply as the resolver's encoder does: hosts with their identity
// statements by hand (Signed.AppendJSON), the rest by json.Marshal; trusted_keys only when the reply
// carries them.
func EncodeSetsLikeResolver(tb testing.TB, reply protocol.ResolveSetsReply) []byte {
	tb.Helper()
	configs, err := json.Marshal(reply.Configs)
	if err != nil {
		tb.Fatal(err)
	}
	buf := fmt.Appendf(nil, `{"contract":%d,"configs":%s,"sets":[`, reply.Contract, configs)
	for i, set := range reply.Sets {
		if i > 0 {
			buf = append(buf, ',')
		}
		head, err := json.Marshal(struct {
			ClientID      string         `json:"client_id"`
			EnvironmentID string         `json:"environment_id"`
			Configs       map[string]int `json:"configs"`
		}{set.ClientID, set.EnvironmentID, set.Configs})
		if err != nil {
			tb.Fatal(err)
		}
		buf = append(append(buf, head[:len(head)-1]...), `,"hosts":[`...)
		for k, h := range set.Hosts {
			if k > 0 {
				buf = append(buf, ',')
			}
			buf = fmt.Appendf(buf, `{"host_id":%q,"agent_id":%q,"identity":`, h.HostID, h.AgentID)
			if buf, err = h.Identity.AppendJSON(buf); err != nil {
				tb.Fatal(err)
			}
			buf = append(buf, '}')
		}
		buf = append(buf, "]}"...)
	}
	buf = append(buf, ']')
	if reply.TrustedKeys != nil {
		buf = append(buf, `,"trusted_keys":`...)
		if buf, err = reply.TrustedKeys.AppendJSON(buf); err != nil {
			tb.Fatal(err)
		}
	}
	return append(buf, '}')
}
