package agentconfig

import "bytes"

// IsNull reports whether raw holds no JSON value: nil, empty, only whitespace, or the literal null
// (whitespace around it allowed). ConfigSync gives all of them one meaning, "no config" (a deleted or
// absent config, a command without a payload), on the backend and on the agent alike.
func IsNull(raw []byte) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || string(t) == "null"
}
