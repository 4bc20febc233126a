package fleet

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/configsync/configsync/libs/protocol"
)

// encodeHeartbeat is json.Marshal(hb) written directly: loadgen sends tens of thousands of heartbeats a
// second at 100,000 agents on the machine it measures, and reflection and the map's key sort in
// encoding/json were 18% of its CPU in a heartbeat run (its -cpuprofile). A string that encoding/json
// would escape (a quote, a backslash, a control character, <, >, &, non-ASCII) sends it to json.Marshal;
// otherwise the bytes are the same (TestEncodeHeartbeatIsJSONMarshal).
func encodeHeartbeat(hb protocol.Heartbeat) ([]byte, error) {
	if !protocol.PlainJSONString(hb.AgentID) || !protocol.PlainJSONString(hb.AgentVersion) || !protocol.PlainJSONString(hb.ConfigHash) || hb.SentAt.Year() < 0 || hb.SentAt.Year() > 9999 {
		return json.Marshal(hb)
	}
	keys := make([]string, 0, len(hb.ConfigVersions))
	for k := range hb.ConfigVersions {
		if !protocol.PlainJSONString(k) {
			return json.Marshal(hb)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := make([]byte, 0, 256+32*len(keys))
	b = append(b, `{"agent_id":"`...)
	b = append(b, hb.AgentID...)
	b = append(b, `","sent_at":"`...)
	b = hb.SentAt.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","agent_version":"`...)
	b = append(b, hb.AgentVersion...)
	b = append(b, `","config_hash":"`...)
	b = append(b, hb.ConfigHash...)
	b = append(b, `","config_version":`...)
	b = strconv.AppendInt(b, hb.ConfigVersion, 10)
	b = append(b, `,"config_versions":`...)
	if hb.ConfigVersions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = append(b, k...)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, hb.ConfigVersions[k], 10)
		}
		b = append(b, '}')
	}
	if hb.HeartbeatIntervalMS != 0 {
		b = append(b, `,"heartbeat_interval_ms":`...)
		b = strconv.AppendInt(b, hb.HeartbeatIntervalMS, 10)
	}
	return append(b, '}'), nil
}

// encodeFetchRequest is json.Marshal(protocol.FetchRequest{AgentID: agentID}) written directly (one
// per agent in a herd); an id encoding/json would escape takes json.Marshal (agent ids never do).
func encodeFetchRequest(agentID string) ([]byte, error) {
	if !protocol.PlainJSONString(agentID) {
		return json.Marshal(protocol.FetchRequest{AgentID: agentID})
	}
	b := make([]byte, 0, len(`{"agent_id":""}`)+len(agentID))
	b = append(b, `{"agent_id":"`...)
	b = append(b, agentID...)
	return append(b, `"}`...), nil
}
