package deliver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/configsync/configsync/libs/protocol"
)

// RepairStats counts what the Repairer did since start.
type RepairStats struct {
	// Requests received and hosts in them.
	Requests, Hosts int64
	// Published: config_update commands sent (one per host and type).
	Published int64
	// Withheld: (host, type) pairs not sent because the type cannot be delivered whole (a credential
	// that fails: the fetch reply's type_errors). ack-ingest backs off before asking again.
	Withheld int64
	// Failed: hosts that could not be resolved (unknown, revoked) or commands the connection refused.
	Failed int64
}

// Repairer answers anti-entropy: ack-ingest found hosts whose heartbeat shows a type behind what they
// should hold (a push was lost, came before the agent listened, or was never sent because the host
// looked offline) and asks delivery, the only service that publishes to agents, to send them those
// types. Each host gets exactly what its fetch would give for the type now — resolved afresh,
// credentials injected, a deleted type as a null payload — in a config_update command with the same
// command id a push of that version has. A type written again since ack-ingest looked is left to that
// write's own push.
type Repairer struct {
	fetcher   *Fetcher
	publisher CommandPublisher
	now       func() time.Time
	log       *zap.Logger

	requests, hosts, published, withheld, failed atomic.Int64
}

// NewRepairer returns a Repairer resolving through fetcher and publishing with publisher.
func NewRepairer(fetcher *Fetcher, publisher CommandPublisher, log *zap.Logger) *Repairer {
	return &Repairer{fetcher: fetcher, publisher: publisher, now: time.Now, log: log}
}

// Stats returns the counters.
func (r *Repairer) Stats() RepairStats {
	return RepairStats{Requests: r.requests.Load(), Hosts: r.hosts.Load(), Published: r.published.Load(),
		Withheld: r.withheld.Load(), Failed: r.failed.Load()}
}

// repairChunk bounds the hosts resolved together (one resolver request and one injection each).
const repairChunk = 256

// Repair sends each host of req the types it names, as they are now. Errors wrap ErrInvalidRequest;
// per-host failures are counted and logged, never returned: ack-ingest asks again after its backoff.
func (r *Repairer) Repair(ctx context.Context, req protocol.RepairRequest) error {
	if len(req.Hosts) == 0 || len(req.Hosts) > protocol.MaxRepairHosts {
		return fmt.Errorf("%w: a repair request names 1 to %d hosts", ErrInvalidRequest, protocol.MaxRepairHosts)
	}
	r.requests.Add(1)
	hosts := slices.DeleteFunc(slices.Clone(req.Hosts), func(h protocol.RepairHost) bool {
		return !protocol.ValidAgentID(h.AgentID) || len(h.Types) == 0
	})
	r.hosts.Add(int64(len(hosts)))
	issuedAt := r.now().UTC()
	var published, withheld, failed, superseded int
	var withheldSample []string
	for lo := 0; lo < len(hosts); lo += repairChunk {
		chunk := hosts[lo:min(lo+repairChunk, len(hosts))]
		ids := make([]string, len(chunk))
		for i, h := range chunk {
			ids[i] = h.AgentID
		}
		results := r.fetcher.FetchBatch(ctx, ids)
		var buf []byte
		for i, h := range chunk {
			res := results[i]
			if res.Err != nil {
				failed++
				continue
			}
			for _, t := range slices.Sorted(maps.Keys(h.Types)) {
				if _, bad := res.Reply.TypeErrors[t]; bad {
					withheld++
					if len(withheldSample) < 10 {
						withheldSample = append(withheldSample, h.AgentID+"/"+t)
					}
					continue
				}
				version, ok := res.Reply.Versions[t]
				if !ok {
					continue // no row at either level any more: nothing to send
				}
				if version > h.Types[t].Expected {
					// Written again since ack-ingest looked: that write's own push is on its way (and
					// is repaired in turn if lost), so it is not sent twice.
					superseded++
					continue
				}
				var statement *protocol.Signed
				if st, ok := res.Reply.Statements[t]; ok {
					statement = &st
				}
				tmpl, err := newCommandTemplate(t, version, res.Reply.Configs[t], res.Reply.SecretFields[t], statement, issuedAt)
				if err != nil {
					failed++
					continue
				}
				buf = tmpl.appendCommand(buf[:0], commandID(h.AgentID, t, version))
				if err := r.publisher.Publish(ctx, h.AgentID, buf); err != nil {
					failed++
					continue
				}
				published++
			}
		}
	}
	if err := r.publisher.Flush(ctx); err != nil {
		r.log.Warn("repair: flush failed; commands may not have reached agents", zap.Error(err))
	}
	r.published.Add(int64(published))
	r.withheld.Add(int64(withheld))
	r.failed.Add(int64(failed))
	fields := []zap.Field{zap.Int("hosts", len(hosts)), zap.Int("published", published), zap.Int("withheld", withheld),
		zap.Int("superseded", superseded), zap.Int("failed", failed)}
	if withheld > 0 {
		r.log.Warn("repair: types withheld, they cannot be delivered whole", append(fields, zap.Strings("sample", withheldSample))...)
	} else {
		r.log.Info("repair sent", fields...)
	}
	return nil
}
