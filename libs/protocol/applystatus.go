package protocol

import "time"

// ApplyStatus is config-api's answer to GET .../agent-configs/{type}/status: how far the current
// version of a type has been applied. The API writes it and cfgctl reads it.
type ApplyStatus struct {
	ConfigType     string            `json:"config_type"`
	Version        int64             `json:"version"`
	Deleted        bool              `json:"deleted"`
	WrittenAt      time.Time         `json:"written_at"`
	Targets        int               `json:"targets"`
	Applied        int               `json:"applied"`
	Failed         int               `json:"failed"`
	Pending        int               `json:"pending"`
	Offline        int               `json:"offline"`
	OtherHosts     int               `json:"other_hosts"`
	TopErrors      []ApplyErrorCount `json:"top_errors"`
	SlowestApplyMS *int64            `json:"slowest_apply_ms"`
	SlowestHostID  *string           `json:"slowest_host_id"`
	Done           bool              `json:"done"`
}

// ApplyErrorCount is one apply error text and how many targets report it.
type ApplyErrorCount struct {
	Error string `json:"error"`
	Hosts int    `json:"hosts"`
}
