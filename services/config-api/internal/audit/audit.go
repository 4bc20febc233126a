// Package audit reads the audit log (written by tenancy.Guard): newest first, filtered by actor, object
// and time, paged, and restricted to the caller's client like every other read.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/configsync/configsync/services/config-api/internal/fault"
	"github.com/configsync/configsync/services/config-api/internal/tenancy"
)

// Page limits.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// Event is one stored audit event.
type Event struct {
	ID        int64
	Actor     string
	ClientID  uuid.NullUUID
	Action    string
	Object    string
	Detail    json.RawMessage
	CreatedAt time.Time
}

// Filter selects events. Zero fields select everything; Before pages (events with a smaller id).
type Filter struct {
	Actor  string
	Object string
	Since  *time.Time
	Until  *time.Time
	Before int64
	Limit  int
}

// Query is a Filter as the store runs it: restricted to Client unless it is not Valid (admin).
type Query struct {
	Filter
	Client uuid.NullUUID
}

// Store reads audit events, newest first, at most Limit of them.
type Store interface {
	AuditEvents(ctx context.Context, q Query) ([]Event, error)
}

// Page is one page of events; NextBefore is set when older events follow.
type Page struct {
	Events     []Event
	NextBefore int64
}

// Service is the audit read use case.
type Service struct {
	store Store
}

// NewService returns a Service.
func NewService(store Store) *Service { return &Service{store: store} }

// List returns a page of the events the caller may see: an admin every event, a client-scoped caller
// only its own client's.
func (s *Service) List(ctx context.Context, p tenancy.Principal, f Filter) (Page, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultPageSize
	}
	if f.Limit > MaxPageSize {
		return Page{}, fault.Invalidf("limit must be at most %d", MaxPageSize)
	}
	if f.Since != nil && f.Until != nil && !f.Since.Before(*f.Until) {
		return Page{}, fault.Invalidf("since must be before until")
	}
	if f.Before < 0 {
		return Page{}, fault.Invalidf("before must be a positive event id")
	}
	limit := f.Limit
	f.Limit = limit + 1
	evs, err := s.store.AuditEvents(ctx, Query{Filter: f, Client: p.Filter()})
	if err != nil {
		return Page{}, fmt.Errorf("audit: list: %w", err)
	}
	page := Page{Events: evs}
	if len(evs) > limit {
		page.Events = evs[:limit]
		page.NextBefore = evs[limit-1].ID
	}
	if !p.Admin() {
		for i := range page.Events {
			if d, foreign := foreignCallerHidden(page.Events[i].Detail, p.ClientID.UUID); foreign {
				page.Events[i].Detail, page.Events[i].Actor = d, ForeignActor
			}
		}
	}
	return page, nil
}

// ForeignActor stands for the actor of an event that another client's token caused (a cross-tenant
// attempt on the caller's object), as a client-scoped caller sees it.
const ForeignActor = "(another client)"

// foreignCallerHidden reports whether another client caused the event (a cross-tenant attempt on this
// client's object) and then returns the detail without who called: the owner learns of the attempt, not
// the other client's ids or token.
func foreignCallerHidden(detail json.RawMessage, own uuid.UUID) (json.RawMessage, bool) {
	var d map[string]any
	if len(detail) == 0 || json.Unmarshal(detail, &d) != nil {
		return detail, false
	}
	caller, ok := d["caller_client_id"].(string)
	if !ok || caller == own.String() {
		return detail, false
	}
	delete(d, "caller_client_id")
	delete(d, "token_id")
	out, err := json.Marshal(d)
	if err != nil {
		return nil, true
	}
	return out, true
}
