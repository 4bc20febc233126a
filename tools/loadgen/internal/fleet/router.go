package fleet

import (
	"strings"

	"github.com/configsync/configsync/libs/protocol"
)

// Router demultiplexes commands to simulated agents by the agent id token of their subject
// (configsync.cmd.<agent_id>). It is built once and only read afterwards, so lookups take no lock.
type Router struct {
	agents map[string]*Agent
}

// NewRouter routes to agents by ID.
func NewRouter(agents []*Agent) *Router {
	r := &Router{agents: make(map[string]*Agent, len(agents))}
	for _, a := range agents {
		r.agents[a.ID] = a
	}
	return r
}

// Route returns the agent a command subject is addressed to. ok is false for a subject that is not a
// command subject, or that names an agent this fleet does not simulate (a real agent sharing the
// NATS account, for instance): such commands are counted and dropped.
func (r *Router) Route(subject string) (a *Agent, ok bool) {
	id, found := strings.CutPrefix(subject, protocol.CommandSubjectPrefix)
	if !found || !protocol.ValidAgentID(id) {
		return nil, false
	}
	a, ok = r.agents[id]
	return a, ok
}

// Len is the number of agents routed to.
func (r *Router) Len() int { return len(r.agents) }
